"""`seer bench rollout`: one workload under every scheduling policy, side by side.

The workload (pipeline.records.workload) has the shape of RL rollouts: long-tailed,
group-correlated output lengths, generated with ignore_eos up to per-sample targets that
only the engine and the oracle see. One topology (splitter, estimator, scheduler, 2
generator processes with a small KV budget) runs `baseline`, `divided`, `context_aware`
and `oracle` on the same prompts, seeds and model, interleaved and repeated (3 times by
default; the table and JSON report medians). Before that, the same model runs in this
process to measure the per-token costs the lower bound needs: the full-batch cost (steps
with every slot decoding) and the longest request alone. The live topology and the
bench generator are shared with `seer sim validate` (``pipeline.rollout.live``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from actors.generator import ChunkRequest, GeneratorOptions, SamplingParams
from actors.generator.builtin import build_torch_engine
from pipeline.config import build_options
from pipeline.records.metrics import compute_metrics
from pipeline.records.plot import drawn, maybe_plot_timeline
from pipeline.records.report import results_table, write_results
from pipeline.records.trace import load_trace, save_trace
from pipeline.records.workload import Workload, describe, make_workload, workload_from_trace
from pipeline.rollout.live import POLICIES, bench_generator, run_policies
from transport.messages import RolloutRecord

__all__ = ["POLICIES", "bench_generator", "measure_costs", "run", "run_policies", "summarize"]


def measure_costs(workload: Workload, gen: dict[str, Any]) -> dict[str, float]:
    """Per-token cost at a full batch, and the longest request's time alone, in-process."""
    opts = build_options(GeneratorOptions, {**gen, "kv_budget_tokens": 1 << 20}, "generator")
    engine = build_torch_engine(opts.model, opts.engine_config())
    full = engine.config.max_batch
    greedy = SamplingParams(temperature=0.0, ignore_eos=True)
    longest = max(((n, p) for p in workload.prompts for n in p.target_lens), key=lambda x: x[0])
    for i in range(full):  # saturate: every slot decoding the longest length
        engine.add(ChunkRequest(f"full{i}", longest[1].token_ids, longest[0], params=greedy))
    busy = tokens = 0.0
    while engine.has_work():
        start = time.perf_counter()
        result = engine.step()
        if result.num_decode_rows == full and not result.num_prefill_tokens:
            busy += time.perf_counter() - start
            tokens += full
    engine.add(ChunkRequest("solo", longest[1].token_ids, longest[0], params=greedy))
    start = time.perf_counter()
    while engine.has_work():
        engine.step()
    return {
        "per_token_full_batch_s": busy / max(tokens, 1.0),
        "longest_alone_s": time.perf_counter() - start,
        "longest_len": longest[0],
    }


def lower_bound(record: RolloutRecord, busy_timeline: list[list[list[float]]]) -> float:
    """A lower bound on the makespan that holds by construction, from the run's own record:
    the larger of the mean busy time per instance (the work, spread perfectly evenly; each
    instance's busy time lies within the makespan) and the longest request's own span from
    arrival to finish (its critical path as it ran). `efficiency` = bound / makespan <= 1.
    The estimate from costs measured before the run (`ideal_s`: total tokens x the
    full-batch per-token cost / instances, or the longest request alone) is reported beside
    it; it is not a bound (it is measured at another moment, so it can exceed a makespan)."""
    busy = sum(end - start for lane in busy_timeline for start, end in lane)
    work = busy / max(record.num_instances, 1)
    spans = [r.finish_s - r.arrival_s for r in record.requests]
    return max(work, max(spans, default=0.0))


def _median_metrics(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric metric, the median over repeats; other fields from the median run."""
    by_makespan = sorted(runs, key=lambda m: m["makespan_s"])
    out = dict(by_makespan[len(runs) // 2])
    for key, value in out.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = statistics.median(m[key] for m in runs)
    return out


def summarize(records: dict[str, list[RolloutRecord]], costs: dict[str, float]) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    for name, runs in records.items():
        per_run = []
        for record in runs:
            m = compute_metrics(record, per_token_s=costs["per_token_full_batch_s"])
            work = m["output_tokens"] * costs["per_token_full_batch_s"] / record.num_instances
            ideal = max(work, costs["longest_alone_s"])
            bound = lower_bound(record, m["busy_timeline"])
            per_run.append(
                {
                    **{k: v for k, v in m.items() if k != "busy_timeline"},
                    "lower_bound_s": bound,
                    "efficiency": bound / m["makespan_s"],
                    "ideal_s": ideal,
                    "ideal_efficiency": ideal / m["makespan_s"],
                }
            )
        policies[name] = {
            **_median_metrics(per_run),
            "repeats": len(runs),
            "makespans_s": [m["makespan_s"] for m in per_run],
        }
    base = policies["baseline"]["throughput_tok_s"] if "baseline" in policies else None
    ratios = {n: p["throughput_tok_s"] / base for n, p in policies.items()} if base else {}
    return {"policies": policies, "ratios": ratios, "costs": costs}


def _table(summary: dict[str, Any]) -> Table:
    cols = (
        "policy",
        "makespan s",
        "tok/s",
        "vs baseline",
        "tail s",
        "idle",
        "preempt",
        "re-prefill tok",
        "moved",
        "efficiency",
    )
    rows = [
        (
            name,
            f"{p['makespan_s']:.2f}",
            f"{p['throughput_tok_s']:.0f}",
            f"{summary['ratios'].get(name, float('nan')):.2f}x",
            f"{p['tail_s']:.2f}",
            f"{p['idle_fraction']:.0%}",
            str(p["num_preemptions"]),
            str(p["num_reprefilled_tokens"]),
            str(p["chunks_moved"]),
            f"{p['efficiency']:.2f}",
        )
        for name, p in summary["policies"].items()
    ]
    title = "seer bench rollout (2 generator processes, same workload; medians)"
    return results_table(title, cols, rows)


def run(
    json_path: str | None = None,
    quick: bool = False,
    trace: str | None = None,
    chunk_size: int = 128,
    out_dir: str | None = None,
    repeats: int | None = None,
    policies: tuple[str, ...] = POLICIES,
) -> dict[str, Any]:
    console = Console(width=140)
    repeats = repeats or (1 if quick else 3)
    workload = (
        workload_from_trace(load_trace(trace))
        if trace
        else make_workload(num_groups=8, group_size=4, mean_len=60, max_len=180)
        if quick
        else make_workload()
    )
    shape = describe(workload)
    console.print(
        f"workload: {shape['num_requests']} requests, {shape['total_tokens']} tokens, "
        f"p50 {shape['p50']:.0f} / p99 {shape['p99']:.0f} / max {shape['max']} tokens "
        f"(p99/p50 {shape['p99_over_p50']:.1f}, max/mean {shape['max_over_mean']:.1f})"
    )
    gen = bench_generator(quick)
    costs = measure_costs(workload, gen)
    records = anyio.run(run_policies, workload, gen, chunk_size, policies, console, repeats)
    summary = {
        **summarize(records, costs),
        "workload": shape,
        "generator": gen,
        "chunk_size": chunk_size,
    }
    median_runs = {
        n: sorted(rs, key=lambda r: r.makespan_s)[len(rs) // 2] for n, rs in records.items()
    }
    console.print(_table(summary))
    folder = Path(out_dir or (Path(json_path).parent if json_path else tempfile.mkdtemp()))
    folder.mkdir(parents=True, exist_ok=True)
    png = maybe_plot_timeline(median_runs, folder / "rollout-timeline.png")
    summary["timeline_png"] = str(png) if png else None
    trace_path = folder / "rollout-trace.json"
    summary["trace"] = str(save_trace(median_runs[policies[-1]], trace_path))
    json_path = json_path or str(folder / "rollout-bench.json")
    write_results(json_path, summary, default=float)
    console.print(f"wrote {json_path}, {drawn(png)}, {summary['trace']}")
    return summary
