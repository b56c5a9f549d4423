"""Instance speeds for `seer sim validate`'s replays: how fast each live generator ran.

On a shared host two generator processes doing the same work run at different speeds,
and a rollout waits for the slower one. ``instance_speeds`` and ``instance_paces`` read a
live generator's speed against the cost table from its step log (for the whole rollout,
or window by window); ``cost_factors`` pools whole rollouts' factors from the *other*
seeds (leave one seed out), ``centred`` keeps only their spread, and ``_drawn`` replays a
rollout ``DRAWS`` times, each at one pooled rollout's factors. See
docs/sim-validation-method.md.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import numpy as np

from pipeline.records.metrics import compute_metrics
from pipeline.sim import steplog
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, simulate
from pipeline.sim.validate.live import _Block
from transport.messages import RolloutRecord

__all__ = [
    "DRAWS",
    "PACE_WINDOW_S",
    "Pool",
    "centred",
    "cost_factors",
    "instance_paces",
    "instance_speeds",
    "pool_key",
]

Pool = list[tuple[float, ...]]  # live rollouts' cost factors, one per generator, in order


DRAWS = 9  # speed draws per replay (odd: the median is one of them)


def instance_speeds(
    runs: list[list[dict[str, float]]], cost: CostModel, num_instances: int
) -> tuple[float, ...]:
    """Each live instance's engine time over the table's price for its own logged steps
    (instance order; 1.0 for an instance that logged none): how much slower or faster than
    the table that generator ran in that rollout. Input to the speed-normalized replay, a
    diagnostic that takes the machine's speed from the run it checks, so it tests the
    scheduling, KV and batching model, not the cost table."""
    ratios = [steplog.teacher_forced([steps], cost)["predicted_over_measured"] for steps in runs]
    ratios += [0.0] * (num_instances - len(ratios))
    return tuple(1.0 / r if r > 0 else 1.0 for r in ratios[:num_instances])


def _works(step: dict[str, float]) -> bool:
    """A logged step that ran the engine (decode rows or prefill) for a measurable time."""
    return step["end_s"] > step["start_s"] and bool(
        step["num_decode_rows"] or step["num_prefill_tokens"]
    )


PACE_WINDOW_S = 0.25  # the paced diagnostic's windows (the pace decorrelates over 1-5 s)


def instance_paces(
    runs: list[list[dict[str, float]]],
    record: RolloutRecord,
    cost: CostModel,
    num_instances: int,
    window_s: float = PACE_WINDOW_S,
) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Each live instance's speed through the rollout, window by window on the trace's
    clock: its logged engine time over the table's price for its steps that began in each
    ``window_s`` (a window whose steps the table prices below a fifth of it: the
    instance's whole-rollout factor, ``instance_speeds``). The clock is aligned by each
    instance's first chunk: it began with that instance's first working step (the median
    over instances). Input to the paced diagnostic, which takes the machine's speed as it
    varied within the run it checks, so it tests everything but the machine's pace."""
    whole = instance_speeds(runs, cost, num_instances)
    working = [[s for s in steps if _works(s)] for steps in runs]
    offsets = []
    for i, steps in enumerate(working):
        starts = [c.start_s for c in record.chunks if c.instance == i]
        if steps and starts:
            offsets.append(steps[0]["start_s"] - min(starts))
    if not offsets:
        return tuple(((0.0, f),) for f in whole)
    offset = statistics.median(offsets)
    out = []
    for i in range(num_instances):
        took: dict[int, float] = {}
        priced: dict[int, float] = {}
        for s in working[i] if i < len(working) else []:
            w = max(int((s["start_s"] - offset) // window_s), 0)
            took[w] = took.get(w, 0.0) + s["end_s"] - s["start_s"]
            priced[w] = priced.get(w, 0.0) + steplog.predict(s, cost)
        last = max(took, default=0)
        out.append(
            tuple(
                (
                    w * window_s,
                    took[w] / priced[w] if priced.get(w, 0.0) >= window_s / 5 else whole[i],
                )
                for w in range(last + 1)
            )
        )
    return tuple(out)


def pool_key(block: _Block, policy: str | None = None) -> str:
    """The cost-factor pool a block's replays draw from: its seed and speculation setting
    (``"2"``, ``"2+drafts"``), and with ``policy`` the configuration's (``"2+drafts:divided"``)."""
    return f"{block.seed}{block.suffix}" + (f":{policy}" if policy else "")


def cost_factors(blocks: list[_Block], cost: CostModel, by: str = "setting") -> dict[str, Pool]:
    """Per seed and speculation setting (``pool_key``): the cost factors the live generator
    processes ran at, from every *other* seed's runs with the same setting, so that no
    run's own speed prices its replay (leave one seed out): each generator's logged engine
    time in a rollout over the table's price for its own steps, a rollout's generators
    together: the pool sets how fast the live topology runs, relative to the table, and
    how unevenly (``centred``: the spread alone). A draw is one whole rollout's factors,
    never one instance's from here and another's from there (the machine's pace moves both
    at once), and settings are not pooled together (with drafts the steps run slower
    against the table): docs/sim-validation-method.md, "Cost factors". A rollout in which
    a generator logged no step is left out. Empty for a seed with no other seed's step
    logs. ``by="config"``: per configuration (policy and setting) instead, from the other
    seeds' runs of the same configuration (``pool_key(block, policy)``), since the
    configurations' steps ran at different speeds against the table."""
    per_block: dict[tuple[int, str, str], Pool] = {}
    # every generator's log, or none of the rollout (a generator lost under load logs none)
    width = max((len(runs) for block in blocks for runs in block.steps.values()), default=0)
    for block in blocks:
        for policy, runs in block.steps.items():
            if len(runs) == width and all(runs):
                factors = instance_speeds(runs, cost, len(runs))
                key = (block.seed, block.suffix, policy if by == "config" else "")
                per_block.setdefault(key, []).append(factors)
    pools: dict[str, Pool] = {}
    for block in blocks:
        for policy in block.steps if by == "config" else [""]:
            pool = [
                f
                for (other, setting, of), fs in per_block.items()
                if other != block.seed and setting == block.suffix and of == policy
                for f in fs
            ]
            if pool:
                pools[pool_key(block, policy or None)] = sorted(pool)
    return pools


def centred(pool: Pool) -> Pool:
    """``pool`` over the median of its factors: the table sets the level, the pool only the
    spread."""
    middle = statistics.median(f for factors in pool for f in factors)
    return [tuple(f / middle for f in factors) for factors in pool]


def _at_speeds(
    reqs: Any,
    policy: str,
    cfg: SimConfig,
    cost: CostModel,
    acceptance: Any,
    speeds: tuple[float, ...],
    spec_state: Any = None,
) -> dict[str, Any]:
    """The metrics of one replay with each instance's steps costing ``speeds[i]`` times the
    table's price."""
    config = dataclasses.replace(cfg, instance_speed=speeds)
    sim = simulate(reqs, policy, config, cost, acceptance=acceptance, spec_state=spec_state)
    return compute_metrics(sim.record)


def _drawn(
    reqs: Any,
    policy: str,
    cfg: SimConfig,
    cost: CostModel,
    acceptance: Any,
    pool: Pool,
    key: tuple[int, ...],
    spec_state: Any = None,
) -> tuple[list[float], list[float]]:
    """Makespans and tails of ``DRAWS`` replays, each with the instances' cost factors of
    one live rollout drawn from ``pool`` (seeded by ``key``: the same draws every time)."""
    if any(len(factors) != cfg.num_instances for factors in pool):
        raise ValueError(f"every draw in the pool needs {cfg.num_instances} cost factors")
    rng = np.random.default_rng(key)
    makespans, tails = [], []
    for index in rng.integers(len(pool), size=DRAWS):
        speeds = tuple(float(f) for f in pool[index])
        m = _at_speeds(reqs, policy, cfg, cost, acceptance, speeds, spec_state)
        makespans.append(m["makespan_s"])
        tails.append(m["tail_s"])
    return makespans, tails
