"""`seer bench eviction`: the built-in engine's parked-KV eviction rules side by side.

When room is needed, the engine evicts parked KV (a request's KV kept after its chunk
ended, for its next chunk). "lru" evicts the least recently used. That cascades when
several chunks end in one step and their next chunks queue behind a request that needs
room: it evicts the first one's KV, the first then prefills its whole context again and
evicts the second's, and so on through all of them. "queue" (the default) evicts the KV of
requests whose next chunk is not queued first, then the queued request that runs last
(``actors.generator.builtin.batch.ParkedStore.evict``).

The live topology of ``seer bench rollout`` (2 generator processes, each pinned to a core,
the real splitter, estimator and scheduler) runs the chunked policies on the KV-bound
workload of ``seer sim validate`` (12 groups x 8, mean 300 / limit 900 tokens, 32 slots
and 6,144 KV tokens per generator), once per rule and seed, the rules alternating which
goes first. Reported per policy: the medians over seeds of makespan, re-prefilled tokens
(each chunk's beyond the one token a resumed chunk re-reads) and preemptions, and the
median over seeds of the makespan ratio queue / lru on the same seed's workload.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from actors.generator.builtin.config import PARKED_EVICTIONS
from pipeline.records.metrics import compute_metrics
from pipeline.records.report import results_table, write_results
from pipeline.records.workload import Workload, make_workload
from pipeline.rollout.live import bench_generator, run_policies
from transport.messages import RolloutRecord

__all__ = ["run"]

POLICIES = ("divided", "context_aware", "oracle")  # the ones that chunk (baseline does not)


def workload(quick: bool, seed: int) -> Workload:
    if quick:  # a smoke test: seconds per rollout
        return make_workload(num_groups=4, group_size=4, mean_len=150, max_len=400, seed=seed)
    return make_workload(num_groups=12, group_size=8, mean_len=300, max_len=900, seed=seed)


def generator(quick: bool) -> dict[str, Any]:
    gen = bench_generator(False)  # 32 slots, 6,144 KV tokens: the workload is KV-bound
    if quick:
        gen = {**gen, "kv_budget_tokens": 1024}
    return gen


def reprefilled(record: RolloutRecord) -> int:
    """Tokens prefilled again because a chunk's KV was not there (a resumed chunk re-reads
    its last sampled token: not counted)."""
    return sum(c.num_reprefilled_tokens for c in record.chunks if c.num_reprefilled_tokens > 1)


def run(
    json_path: str | None = None,
    *,
    quick: bool = False,
    repeats: int | None = None,
    chunk_size: int = 128,
    rules: tuple[str, ...] = PARKED_EVICTIONS,
) -> dict[str, Any]:
    seeds = repeats or (1 if quick else 3)
    if seeds < 1:
        raise ValueError(f"repeats must be >= 1, got {seeds}")
    if set(rules) != set(PARKED_EVICTIONS):
        raise ValueError(f"rules must be {PARKED_EVICTIONS} in some order, got {rules}")
    console = Console(width=140)
    gen = generator(quick)
    runs: dict[str, dict[str, list[RolloutRecord]]] = {r: {p: [] for p in POLICIES} for r in rules}
    for seed in range(seeds):
        order = rules if seed % 2 == 0 else rules[::-1]  # drift hits both rules alike
        for rule in order:
            console.print(f"seed {seed}: parked_eviction = {rule!r}")
            records = anyio.run(
                run_policies,
                workload(quick, seed),
                {**gen, "parked_eviction": rule},
                chunk_size,
                POLICIES,
                console,
            )
            for policy, recs in records.items():
                runs[rule][policy].append(recs[0])
    summary = summarize(runs, seeds)
    summary.update(generator=gen, chunk_size=chunk_size, quick=quick)
    console.print(_table(summary))
    out = Path(json_path) if json_path else Path(tempfile.mkdtemp()) / "eviction-bench.json"
    write_results(out, summary)
    console.print(f"wrote {out}")
    return summary


def summarize(runs: dict[str, dict[str, list[RolloutRecord]]], seeds: int) -> dict[str, Any]:
    """Per rule and policy the seeds' figures and their medians; per policy the median of
    the seeds' makespan ratios queue / lru (the same workload on both sides)."""
    variants: dict[str, dict[str, Any]] = {}
    for rule, by_policy in runs.items():
        variants[rule] = {}
        for policy, records in by_policy.items():
            metrics = [compute_metrics(r) for r in records]
            makespans = [m["makespan_s"] for m in metrics]
            tokens = [reprefilled(r) for r in records]
            preemptions = [m["num_preemptions"] for m in metrics]
            variants[rule][policy] = {
                "makespan_s": makespans,
                "reprefilled_tokens": tokens,
                "preemptions": preemptions,
                "median_makespan_s": statistics.median(makespans),
                "median_reprefilled_tokens": statistics.median(tokens),
                "median_preemptions": statistics.median(preemptions),
            }
    ratios = {
        policy: statistics.median(
            q / lru
            for q, lru in zip(
                variants["queue"][policy]["makespan_s"],
                variants["lru"][policy]["makespan_s"],
                strict=True,
            )
        )
        for policy in POLICIES
    }
    return {"seeds": seeds, "variants": variants, "queue_over_lru_makespan": ratios}


def _table(summary: dict[str, Any]) -> Table:
    lru, queue = summary["variants"]["lru"], summary["variants"]["queue"]
    rows = [
        (
            policy,
            f"{lru[policy]['median_makespan_s']:.2f}",
            f"{queue[policy]['median_makespan_s']:.2f}",
            f"{summary['queue_over_lru_makespan'][policy]:.3f}",
            f"{lru[policy]['median_reprefilled_tokens']:,.0f} / "
            f"{queue[policy]['median_reprefilled_tokens']:,.0f}",
            f"{lru[policy]['median_preemptions']:.0f} / {queue[policy]['median_preemptions']:.0f}",
        )
        for policy in POLICIES
    ]
    return results_table(
        f"seer bench eviction (medians over {summary['seeds']} seeds; 2 CPU generators)",
        (
            "policy",
            "lru makespan s",
            "queue makespan s",
            "queue / lru",
            "re-prefilled lru / queue",
            "preemptions lru / queue",
        ),
        rows,
        caption="queue / lru: the median over seeds of each seed's ratio (the same workload)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench eviction`'s own flags (beside --json and --quick)."""
    parser.add_argument("--repeats", type=int, help="seeds (the same for both rules)")
    parser.add_argument("--chunk-size", type=int, default=128, help="tokens per chunk")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench eviction` from its parsed flags."""
    run(args.json, quick=args.quick, repeats=args.repeats, chunk_size=args.chunk_size)
