"""`seer sim gap`: where context-aware loses to the oracle, measured in the simulator.

Runs one or more Seer workloads (``pipeline.sim.seer``: 32 H200 instances, global KV pool,
no speculation) under ``divided``, ``context_aware`` and ``oracle``, and under diagnostic
variants of context-aware that each get one piece of what the oracle knows, or lose one
rule, so that the gap splits into its causes:

- ``ca_no_starvation``: context-aware with anti-starvation promotions off;
- ``ca_group_max_revealed``: a group's estimate L[g] becomes the group's *true* longest
  output as soon as its first sibling finishes -- the live estimate's timing with a perfect
  value: the best any predictor from finished siblings could do;
- ``ca_group_max_known``: L[g] is the true longest output from the start (no probe needed);
  the requests of a group are still not told apart.

The variants are the live ``ContextAware`` policy with ``estimate`` replaced (same ranks,
probes first, same waiting index and placement); they need true lengths, so they exist here
only, never in the live scheduler. Per policy: throughput, ratio to the oracle, tail,
preemptions, recomputed tokens, and the critical request (the last to finish): its length,
when its first chunk started and how long it waited between chunks. Everything simulated.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from actors.scheduler import ContextAware, Policy
from pipeline.records.metrics import compute_metrics
from pipeline.records.report import results_table, write_results
from pipeline.sim.costmodel import CostModel
from pipeline.sim.seer import POLICIES as SEER_POLICIES
from pipeline.sim.simulator import SimConfig, SimRequest, simulate
from pipeline.sim.workload import SEER_WORKLOADS, seer_requests
from transport.messages import RolloutRecord

__all__ = [
    "VARIANTS",
    "TrueGroupMax",
    "add_arguments",
    "critical_request",
    "run",
    "run_args",
    "run_workload",
]

VARIANTS = (
    "divided",
    "context_aware",
    "ca_no_starvation",
    "ca_group_max_revealed",
    "ca_group_max_known",
    "oracle",
)


class TrueGroupMax(ContextAware):
    """Context-aware whose L[g] is the group's true longest output: from the start, or
    (``revealed``) once the live estimator has reported a finished sibling."""

    def __init__(
        self,
        max_new_tokens: int,
        group_max: Mapping[str, int],
        *,
        revealed: bool,
        starvation_s: float,
        starvation_every: int,
    ) -> None:
        super().__init__(max_new_tokens, starvation_s, starvation_every)
        self.group_max = dict(group_max)
        self.revealed = revealed

    def estimate(self, group_id: str) -> int:
        if self.revealed and group_id not in self._estimates:
            return self.max_new_tokens
        return self.group_max[group_id]


def _variant(
    name: str, reqs: list[SimRequest], cfg: SimConfig
) -> tuple[str, SimConfig, Policy | None]:
    """(scheduler policy name, config, policy object or None) for a variant."""
    if name in ("divided", "context_aware", "oracle"):
        return name, cfg, None
    if name == "ca_no_starvation":
        return "context_aware", dataclasses.replace(cfg, starvation_s=1e18), None
    group_max: dict[str, int] = {}
    for r in reqs:
        group_max[r.group_id] = max(group_max.get(r.group_id, 0), r.output_len)
    limit = max(r.max_new_tokens for r in reqs)
    policy = TrueGroupMax(
        limit,
        group_max,
        revealed=name == "ca_group_max_revealed",
        starvation_s=cfg.starvation_s,
        starvation_every=cfg.starvation_every,
    )
    return "context_aware", cfg, policy


def critical_request(record: RolloutRecord) -> dict[str, Any]:
    """The last request to finish: its length, first start, and waits between its chunks."""
    last = max(record.requests, key=lambda r: (r.finish_s, r.request_id))
    chunks = sorted(
        (c for c in record.chunks if c.request_id == last.request_id), key=lambda c: c.chunk_seq
    )
    first = chunks[0].start_s if chunks else 0.0
    between = sum(max(0.0, b.start_s - a.end_s) for a, b in itertools.pairwise(chunks))
    return {
        "request_id": last.request_id,
        "output_len": last.output_len,
        "first_start_s": first,
        "waits_between_chunks_s": between,
        "finish_s": last.finish_s,
        "num_chunks": len(chunks),
    }


def run_workload(
    name: str,
    *,
    variants: tuple[str, ...] = VARIANTS,
    num_instances: int = 32,
    chunk_size: int = 4096,
    max_batch: int = 256,
    scale: float = 1.0,
    seed: int = 0,
    console: Console | None = None,
) -> dict[str, Any]:
    w = SEER_WORKLOADS[name]
    reqs = seer_requests(w, seed=seed, scale=scale)
    cost = CostModel.builtin(w.shape)
    out: dict[str, Any] = {}
    for variant in variants:
        _, _, pool = SEER_POLICIES["context_aware" if variant.startswith("ca_") else variant]
        base = SimConfig(
            num_instances=num_instances,
            max_batch=max_batch,
            kv_capacity=w.kv_capacity,
            chunk_size=chunk_size,
            kv_pool=pool,  # type: ignore[arg-type]
            seed=seed,
        )
        sched, cfg, policy = _variant(variant, reqs, base)
        res = simulate(reqs, sched, cfg, cost, policy_object=policy)
        m = compute_metrics(res.record)
        out[variant] = {
            "throughput_tok_s": m["throughput_tok_s"],
            "makespan_s": m["makespan_s"],
            "tail_s": m["tail_s"],
            "preemptions": m["num_preemptions"],
            "num_recomputed_tokens": m["num_recomputed_tokens"],
            "starvation_picks": res.counters["starvation_picks"],
            "critical": critical_request(res.record),
            "sim_cpu_s": res.cpu_s,
        }
        if console:
            c = out[variant]["critical"]
            console.print(
                f"  {name} {variant}: makespan {m['makespan_s']:.0f} s; critical request "
                f"{c['request_id']} ({c['output_len']} tokens) first started at "
                f"{c['first_start_s']:.0f} s (simulated in {res.cpu_s:.1f} s CPU)"
            )
    if "oracle" in out:
        best = out["oracle"]["throughput_tok_s"]
        for v in out.values():
            v["of_oracle"] = v["throughput_tok_s"] / best
    return {"policies": out, "num_requests": len(reqs), "scale": scale}


def run(
    json_path: str | None = None,
    *,
    workloads: tuple[str, ...] = ("qwen2-vl-72b", "kimi-k2"),
    scale: float = 1.0,
    chunk_size: int = 4096,
    num_instances: int = 32,
    seed: int = 0,
) -> dict[str, Any]:
    console = Console(width=150)
    start = time.perf_counter()
    result: dict[str, Any] = {"workloads": {}, "label": "simulated"}
    for name in workloads:
        if name not in SEER_WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; valid: {', '.join(SEER_WORKLOADS)}")
        result["workloads"][name] = run_workload(
            name,
            num_instances=num_instances,
            chunk_size=chunk_size,
            scale=scale,
            seed=seed,
            console=console,
        )
    result["wall_s"] = time.perf_counter() - start
    console.print(_table(result))
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result


def _table(result: dict[str, Any]) -> Table:
    cols = (
        "workload",
        "policy",
        "tok/s",
        "of oracle",
        "tail s",
        "preempt",
        "recomputed",
        "critical: len",
        "first start s",
        "waits s",
    )
    rows = []
    for name, w in result["workloads"].items():
        for pol, p in w["policies"].items():
            c = p["critical"]
            rows.append(
                (
                    name,
                    pol,
                    f"{p['throughput_tok_s']:.0f}",
                    f"{p.get('of_oracle', float('nan')):.3f}",
                    f"{p['tail_s']:.0f}",
                    str(p["preemptions"]),
                    f"{p['num_recomputed_tokens'] / 1e6:.2f}M",
                    str(c["output_len"]),
                    f"{c['first_start_s']:.0f}",
                    f"{c['waits_between_chunks_s']:.0f}",
                )
            )
    title = "seer sim gap (SIMULATED): context-aware against the oracle, by cause"
    return results_table(title, cols, rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer sim gap`'s own flags (beside --json)."""
    parser.add_argument(
        "--workload",
        action="append",
        help=f"default qwen2-vl-72b and kimi-k2; repeat for several: {', '.join(SEER_WORKLOADS)}",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the groups")
    parser.add_argument("--chunk-size", type=int, default=4096, help="tokens per chunk")
    parser.add_argument("--instances", type=int, default=32, help="generator instances")


def run_args(args: argparse.Namespace) -> None:
    """`seer sim gap` from its parsed flags."""
    run(
        args.json,
        workloads=tuple(args.workload) if args.workload else ("qwen2-vl-72b", "kimi-k2"),
        scale=args.scale,
        chunk_size=args.chunk_size,
        num_instances=args.instances,
    )
