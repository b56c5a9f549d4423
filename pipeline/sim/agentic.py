"""`seer sim agentic`: multi-turn episodes at Seer's scale, simulated on the H200 tables.

The agentic workload (``AgenticWorkload``, ``episodes``), drawn from a seed, is shared with
the live `seer bench agentic` (pipeline/bench/agentic.py). Per episode:
- turns: ``round(exp(log(mean_turns) + z_group + z_sample))`` clipped to
  ``[1, max_turns]``, ``z_group ~ N(0, group_sigma)`` shared by a group's samples (so
  lengths are correlated within a group), ``z_sample ~ N(0, sample_sigma)``;
- action tokens per turn: ``mean_action`` times a lognormal of sigma ``action_sigma``
  (0: every turn exactly ``mean_action``, as live, where a turn ends at the episode's
  ``max_turn_tokens``), clipped to ``[1, max_action]``;
- between turns, observation tokens uniform in ``[min_obs, max_obs]`` and the
  environment's latency lognormal with median ``latency_median_s`` and sigma
  ``latency_sigma``, clipped to ``max_latency_s``.

``run`` replays one such workload (``pipeline.sim.simulator.simulate_turns``: environment
latency as an event between a request's turns, the KV parked on its instance, a move
re-prefills) under the four policies: ``baseline`` (veRL-style: whole turns, groups
pinned round-robin, but every turn placed as a fresh request, least-loaded, no KV
affinity: an agent loop over plain servers), ``divided``, ``context_aware`` and
``oracle`` (sticky turns, chunks of ``chunk_size``), on the Moonlight MoE H200 table with
its KV capacity, and reports the table of `seer bench agentic`, labelled simulated.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console

from pipeline.records.metrics import compute_metrics
from pipeline.records.report import results_table, write_results
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, SimRequest
from pipeline.sim.simulator.turns import EpisodeTrace, simulate_turns
from pipeline.sim.workload import SEER_WORKLOADS

__all__ = [
    "POLICIES",
    "SEER_AGENTIC",
    "AgenticWorkload",
    "episodes",
    "run",
    "sim_requests",
    "simulate_policies",
]

POLICIES = ("baseline", "divided", "context_aware", "oracle")


@dataclass(frozen=True, slots=True)
class AgenticWorkload:
    """The distributions of a multi-turn workload (see the module)."""

    num_groups: int
    group_size: int
    prompt_len: int
    mean_turns: float
    max_turns: int
    mean_action: int
    max_action: int
    action_sigma: float
    min_obs: int
    max_obs: int
    latency_median_s: float
    latency_sigma: float
    max_latency_s: float
    group_sigma: float = 0.6
    sample_sigma: float = 0.3
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("num_groups", "group_size", "prompt_len", "max_turns", "mean_action"):
            if getattr(self, name) < 1:
                raise ValueError(f"AgenticWorkload.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_obs <= self.max_obs:
            raise ValueError(
                f"AgenticWorkload: need 0 <= min_obs <= max_obs, got {self.min_obs}, {self.max_obs}"
            )
        if self.mean_turns < 1 or self.max_action < self.mean_action:
            raise ValueError("AgenticWorkload: mean_turns >= 1 and max_action >= mean_action")


# Seer's scale: Moonlight's groups (8 per prompt, 1,024-token prompts) as agentic episodes
SEER_AGENTIC = AgenticWorkload(
    num_groups=400,
    group_size=8,
    prompt_len=1024,
    mean_turns=4.0,
    max_turns=16,
    mean_action=3072,
    max_action=16384,
    action_sigma=0.6,
    min_obs=64,
    max_obs=1024,
    latency_median_s=2.0,
    latency_sigma=1.0,
    max_latency_s=60.0,
)


def episodes(w: AgenticWorkload) -> list[list[EpisodeTrace]]:
    """Per group, its samples' episodes, drawn from ``w.seed``."""
    rng = random.Random(w.seed)
    out = []
    for _ in range(w.num_groups):
        z_group = rng.gauss(0.0, w.group_sigma)
        group = []
        for _ in range(w.group_size):
            z = z_group + rng.gauss(0.0, w.sample_sigma)
            turns = max(1, min(w.max_turns, round(math.exp(math.log(w.mean_turns) + z))))
            actions = tuple(
                max(1, min(w.max_action, round(w.mean_action * _lognormal(rng, w.action_sigma))))
                for _ in range(turns)
            )
            obs = tuple(rng.randint(w.min_obs, w.max_obs) for _ in range(turns - 1))
            lat = tuple(
                min(w.max_latency_s, w.latency_median_s * _lognormal(rng, w.latency_sigma))
                for _ in range(turns - 1)
            )
            group.append(EpisodeTrace(actions, obs, lat))
        out.append(group)
    return out


def _lognormal(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma)) if sigma > 0 else 1.0


def sim_requests(
    w: AgenticWorkload, groups: list[list[EpisodeTrace]]
) -> tuple[list[SimRequest], dict[str, EpisodeTrace]]:
    """The simulator's requests for ``groups`` (each group's first sample its probe) and
    their episodes by request id; every request's limit is the longest episode's length."""
    limit = max(ep.length for g in groups for ep in g)
    reqs, by_id = [], {}
    for g, group in enumerate(groups):
        for k, ep in enumerate(group):
            rid = f"g{g}-{k}"
            reqs.append(
                SimRequest(
                    request_id=rid,
                    group_id=f"g{g}",
                    prompt_id=f"p{g}",
                    is_probe=k == 0,
                    prompt_len=w.prompt_len,
                    output_len=ep.length,
                    max_new_tokens=limit,
                )
            )
            by_id[rid] = ep
    return reqs, by_id


def simulate_policies(
    w: AgenticWorkload,
    cost: CostModel,
    *,
    num_instances: int,
    kv_capacity: int,
    chunk_size: int,
    max_batch: int = 256,
    policies: tuple[str, ...] = POLICIES,
    console: Console | None = None,
) -> dict[str, Any]:
    """The four policies on one drawn workload: ``{"policies": {name: {...}}, "ratios"}``."""
    reqs, by_id = sim_requests(w, episodes(w))
    out: dict[str, Any] = {}
    for name in policies:
        config = SimConfig(
            num_instances=num_instances,
            max_batch=max_batch,
            kv_capacity=kv_capacity,
            chunk_size=chunk_size,
            kv_pool="local",
            seed=w.seed,
        )
        res = simulate_turns(reqs, by_id, name, config, cost, sticky_turns=name != "baseline")
        m = compute_metrics(res.record)
        out[name] = {
            "makespan_s": m["makespan_s"],
            "tail_s": m["tail_s"],
            "throughput_tok_s": m["throughput_tok_s"],
            "reprefill_tokens": res.extra["reprefill_tokens"],
            "lost": len(reqs) - len(res.record.requests),
            "preemptions": m["num_preemptions"],
            "observation_tokens": res.extra["observation_tokens"],
            "env_wait_s": res.extra["env_wait_s"],
            "sim_wall_s": res.wall_s,
        }
        if console:
            console.print(
                f"  {name}: makespan {m['makespan_s']:.0f} s, tail {m['tail_s']:.0f} s "
                f"(simulated in {res.wall_s:.1f} s)"
            )
    base = out.get("baseline", {}).get("throughput_tok_s")
    ratios = {n: p["throughput_tok_s"] / base for n, p in out.items()} if base else {}
    return {"policies": out, "ratios": ratios}


def run(
    json_path: str | None = None,
    *,
    scale: float = 1.0,
    chunk_size: int = 4096,
    num_instances: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    """`seer sim agentic`: ``SEER_AGENTIC`` (``scale``: that fraction of its groups) on
    ``num_instances`` simulated H200s running Moonlight's MoE table."""
    console = Console(width=140)
    start = time.perf_counter()
    groups_kept = max(1, round(SEER_AGENTIC.num_groups * scale))
    w = dataclasses.replace(SEER_AGENTIC, num_groups=groups_kept, seed=seed)
    shape = SEER_WORKLOADS["moonlight"]
    groups = episodes(w)
    lengths = [ep.length for g in groups for ep in g]
    turns = [len(ep.actions) for g in groups for ep in g]
    console.print(
        f"agentic workload: {len(lengths)} episodes, mean {sum(lengths) / len(lengths):.0f} "
        f"tokens, max {max(lengths)}; turns mean {sum(turns) / len(turns):.1f}, max {max(turns)}"
    )
    result = simulate_policies(
        w,
        CostModel.builtin(shape.shape),
        num_instances=num_instances,
        kv_capacity=shape.kv_capacity,
        chunk_size=chunk_size,
        console=console,
    )
    result["workload"] = {
        **asdict(w),
        "num_episodes": len(lengths),
        "mean_episode_tokens": sum(lengths) / len(lengths),
        "max_episode_tokens": max(lengths),
        "mean_turns": sum(turns) / len(turns),
        "cost_shape": shape.shape,
        "kv_capacity_tokens": shape.kv_capacity,
    }
    result["settings"] = {
        "num_instances": num_instances,
        "chunk_size": chunk_size,
        "label": "simulated",
        "wall_s": time.perf_counter() - start,
    }
    console.print(policy_table("seer sim agentic (SIMULATED: H200 Moonlight table)", result))
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result


def policy_table(title: str, result: dict[str, Any]) -> Any:
    """The policies side by side (the live bench prints the same table)."""
    cols = ("policy", "makespan s", "tail s", "tok/s", "vs baseline", "re-prefill tok", "lost")
    rows = [
        (
            name,
            f"{p['makespan_s']:.2f}",
            f"{p['tail_s']:.2f}",
            f"{p['throughput_tok_s']:.0f}",
            f"{result['ratios'].get(name, float('nan')):.2f}x",
            str(p["reprefill_tokens"]),
            str(p["lost"]),
        )
        for name, p in result["policies"].items()
    ]
    return results_table(title, cols, rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer sim agentic`'s own flags (beside --json)."""
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the groups")
    parser.add_argument("--chunk-size", type=int, default=4096, help="tokens per chunk")
    parser.add_argument("--instances", type=int, default=32, help="generator instances")


def run_args(args: argparse.Namespace) -> None:
    """`seer sim agentic` from its parsed flags."""
    run(args.json, scale=args.scale, chunk_size=args.chunk_size, num_instances=args.instances)
