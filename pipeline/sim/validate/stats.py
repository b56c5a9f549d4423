"""The statistics of `seer sim validate`: errors, noise floors, and the resolved ranking.

Per configuration, medians over seeds of live and simulated figures and their relative
errors (``_summarize``); the noise floor, the error a perfect simulator would show were
the live runs as noisy as its speed draws (``noise_floor``, ``worst_noise_floor`` for the
worst configuration); and the ranking on the pairs of configurations the live side can
order at all, by an exact two-sided sign test over seeds (``sign_test``,
``_resolved_ranking``). See docs/sim-validation-method.md.
"""

from __future__ import annotations

import itertools
import math
import statistics
from typing import Any

import numpy as np

from pipeline.rollout.live import POLICIES
from pipeline.sim.acceptance import SEER_CHAIN_ACCEPTANCE
from pipeline.sim.validate.live import _Block
from pipeline.sim.validate.speeds import Pool

__all__ = [
    "MIN_RESOLVING_SEEDS",
    "RANK_ALPHA",
    "noise_floor",
    "sign_test",
    "worst_noise_floor",
]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b if b > 0 else 0.0


def _median_of(policies: dict[str, dict[str, Any]], key: str) -> float | None:
    values = [p[key] for p in policies.values() if key in p]
    return statistics.median(values) if values else None


def noise_floor(draws: list[list[float]], samples: int = 400, seed: int = 0) -> float:
    """The error a perfect simulator would show against live runs as noisy as its draws:
    ``draws`` holds each seed's drawn replays; were each seed's live run one of them, the
    median over seeds of one run per seed would miss the median over seeds of the draws'
    medians (what is reported as simulated) by this much, relatively (the median over
    ``samples`` resamplings)."""
    return statistics.median(_floor_errors(draws, np.random.default_rng(seed), samples))


def worst_noise_floor(
    per_config: list[list[list[float]]], samples: int = 400, seed: int = 0
) -> float:
    """The worst configuration's error a perfect simulator would show: each resampling
    gives every configuration (``per_config``: its seeds' draws, as ``noise_floor`` takes)
    an error as ``noise_floor`` does and keeps the largest; the median over resamplings.
    The worst of eight noisy errors is larger than their median: this is the level the
    worst configuration's error sits at when the simulator is exact."""
    rng = np.random.default_rng(seed)
    errors = [_floor_errors(draws, rng, samples) for draws in per_config]
    return float(statistics.median(max(each) for each in zip(*errors, strict=True)))


def _floor_errors(draws: list[list[float]], rng: np.random.Generator, samples: int) -> list[float]:
    centre = statistics.median(statistics.median(d) for d in draws)
    if not centre > 0:
        return [0.0] * samples
    errs = []
    for _ in range(samples):
        picked = [d[int(rng.integers(len(d)))] for d in draws]
        errs.append(abs(statistics.median(picked) - centre) / centre)
    return errs


def _summarize(rows: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Per configuration: medians over seeds, their errors (``makespan_err``: the simulated
    median against the live one; ``per_seed_makespan_err``: the median of the seeds'
    errors, each a single live run's noise included), the live spread and the per-seed
    makespans."""
    policies: dict[str, dict[str, Any]] = {}
    for name, row in rows.items():
        lives = row["live_makespan_s"]
        med = statistics.median(lives)
        medians = {k: statistics.median(v) for k, v in row.items()}
        policies[name] = {
            **medians,
            # the medians over seeds, simulated against live
            "makespan_err": _rel(medians["sim_makespan_s"], med),
            "tail_err": _rel(medians["sim_tail_s"], medians["live_tail_s"]),
            "uniform_makespan_err": _rel(medians["uniform_makespan_s"], med),
            "uniform_tail_err": _rel(medians["uniform_tail_s"], medians["live_tail_s"]),
            **(
                {
                    "table_makespan_err": _rel(medians["table_makespan_s"], med),
                    "table_tail_err": _rel(medians["table_tail_s"], medians["live_tail_s"]),
                }
                if "table_makespan_s" in medians
                else {}
            ),
            "live_spread": (max(lives) - min(lives)) / med if med > 0 else 0.0,
            "live_makespans_s": lives,
            "sim_makespans_s": row["sim_makespan_s"],
        }
    return policies


RANK_ALPHA = 0.05  # a pair is resolved live when its paired sign test over seeds is this sure


def sign_test(wins: int, n: int) -> float:
    """The exact two-sided sign test: the chance that ``n`` fair coin flips split at least
    as unevenly as ``wins`` : ``n - wins``."""
    if n == 0:
        return 1.0
    k = min(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / (1 << n))


# the fewest seeds on which a configuration winning every seed is resolved (6: p = 1/32)
MIN_RESOLVING_SEEDS = next(n for n in range(1, 64) if sign_test(n, n) <= RANK_ALPHA)


def _test_size(n: int) -> float:
    """How often the sign test over ``n`` seeds resolves a pair that has no order at all."""
    return sum(math.comb(n, k) for k in range(n + 1) if sign_test(k, n) <= RANK_ALPHA) / (1 << n)


def _resolved_ranking(
    policies: dict[str, dict[str, Any]], sim_key: str = "sim_makespan_s"
) -> dict[str, Any]:
    """The ranking on the pairs the live side can tell apart: paired by seed (every
    configuration ran each seed's workload), one configuration finished first on so many
    seeds that an exact two-sided sign test gives p <= ``RANK_ALPHA`` (with 9 seeds: 8 of
    9; fewer than 6 seeds can resolve no pair). ``resolved_ranking_match``: the simulator
    orders every resolved pair as live does, by its median makespans; None when no pair is
    resolved (nothing was checked). ``chance_resolved_pairs``: how many pairs the test
    would resolve were no configuration faster than another (each agreeing by chance
    half the time); ``ranking_match`` asks for every pair, including those whose order live
    is noise."""
    resolved = agree = 0
    seeds = 0
    for a, b in itertools.combinations(policies, 2):
        la, lb = policies[a]["live_makespans_s"], policies[b]["live_makespans_s"]
        if len(la) != len(lb):
            raise ValueError(f"{a} and {b} ran {len(la)} and {len(lb)} seeds: not paired")
        seeds = len(la)
        wins = sum(x < y for x, y in zip(la, lb, strict=True))
        n = sum(x != y for x, y in zip(la, lb, strict=True))  # ties say nothing
        if sign_test(wins, n) <= RANK_ALPHA:
            resolved += 1
            live_first = 2 * wins > n
            sim_first = policies[a][sim_key] < policies[b][sim_key]
            agree += live_first == sim_first
    pairs = len(policies) * (len(policies) - 1) // 2
    return {
        "num_pairs": pairs,
        "num_resolved_pairs": resolved,
        "resolved_pairs_agree": agree,
        "resolved_ranking_match": agree == resolved if resolved else None,
        "chance_resolved_pairs": pairs * _test_size(seeds) if seeds else 0.0,
    }


def _norm_ranking(policies: dict[str, dict[str, Any]], live_rank: list[str]) -> dict[str, Any]:
    """The speed-normalized replay's ranking against the live one (all pairs, and the pairs
    the live side resolves); empty without step logs."""
    if not all("norm_makespan_s" in p for p in policies.values()):
        return {}
    rank = sorted(policies, key=lambda n: policies[n]["norm_makespan_s"])
    resolved = _resolved_ranking(policies, "norm_makespan_s")
    return {
        "norm_ranking_match": rank == live_rank,
        "norm_resolved_ranking_match": resolved["resolved_ranking_match"],
        "norm_resolved_pairs_agree": resolved["resolved_pairs_agree"],
    }


def _acceptance_summary(blocks: list[_Block], fallback: Any) -> dict[str, Any]:
    """Mean acceptance length of a full chain, by siblings ahead, in the live output the
    +drafts replays drafted from (the median over those runs), beside Seer's figures."""
    tables = [b.recorded_acceptance(p) for b in blocks for p in POLICIES if b.streams.get(p)]
    if not tables:
        info = fallback.as_dict() if fallback is not None else {}
        return {"source": "random text" if fallback is not None else "none", **info}
    lengths: dict[str, list[float]] = {}
    for t in tables:
        for r in t.refs:
            lengths.setdefault(str(r), []).append(t.expected_tokens(r, t.g_max))
    return {
        "source": "recorded",
        "mean_acceptance_length_gmax": {
            k: round(statistics.median(v), 3) for k, v in lengths.items()
        },
        "seer_published": {str(k): v for k, v in SEER_CHAIN_ACCEPTANCE.items()},
    }


def _figures(
    policies: dict[str, dict[str, Any]],
    live_rank: list[str],
    live_steps: dict[str, Any] | None,
    teacher: dict[str, float],
    worst_floor: dict[str, float],
    pools: dict[str, Pool],
) -> dict[str, Any]:
    """The summary's figures over the configurations: errors, rankings, noise floors."""
    sim_rank = sorted(policies, key=lambda n: policies[n]["sim_makespan_s"])
    errs = [p["makespan_err"] for p in policies.values()]
    return {
        "policies": policies,
        "ranking_match": live_rank == sim_rank,
        "live_ranking": live_rank,
        "sim_ranking": sim_rank,
        **_resolved_ranking(policies),
        # the protocol's step-time check on steps logged by the live generators (both at
        # once, with the control plane); the in-process run's when no step log exists
        "step_time_err": (live_steps or teacher)["step_time_err"],
        "live_step_time": live_steps,
        "teacher_forced": teacher,
        "median_makespan_err": statistics.median(errs),
        "worst_makespan_err": max(errs),
        "median_tail_err": statistics.median(p["tail_err"] for p in policies.values()),
        # the same with each seed's error, a single live run's noise in it
        "median_per_seed_makespan_err": _median_of(policies, "per_seed_makespan_err"),
        "median_per_seed_tail_err": _median_of(policies, "per_seed_tail_err"),
        # every instance at the table's price (no speed draws)
        "median_uniform_makespan_err": _median_of(policies, "uniform_makespan_err"),
        "median_uniform_tail_err": _median_of(policies, "uniform_tail_err"),
        "uniform_ranking_match": live_rank
        == sorted(policies, key=lambda n: policies[n]["uniform_makespan_s"]),
        # what a perfect simulator would show, the live runs as noisy as the draws
        "median_noise_floor_makespan_err": _median_of(policies, "noise_floor_makespan_err"),
        "median_noise_floor_tail_err": _median_of(policies, "noise_floor_tail_err"),
        "worst_noise_floor_makespan_err": worst_floor.get("makespan"),
        "worst_noise_floor_tail_err": worst_floor.get("tail"),
        # cost factors drawn around the table's level (the pools' spread only)
        "median_table_makespan_err": _median_of(policies, "table_makespan_err"),
        "median_table_tail_err": _median_of(policies, "table_tail_err"),
        # the live generators' cost factors the draws came from, per seed and setting
        "cost_factor_pools": pools,
        # diagnostic (not the validation): each instance at its own live speed
        "median_norm_makespan_err": _median_of(policies, "norm_makespan_err"),
        "median_norm_tail_err": _median_of(policies, "norm_tail_err"),
        # diagnostic: each instance at its live speed window by window (instance_paces)
        "median_paced_makespan_err": _median_of(policies, "paced_makespan_err"),
        "median_paced_tail_err": _median_of(policies, "paced_tail_err"),
        **_norm_ranking(policies, live_rank),
    }
