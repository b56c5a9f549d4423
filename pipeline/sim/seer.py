"""`seer sim seer`: Seer's ablation at Seer's scale, simulated on the measured H200 tables.

One workload per Seer model (``pipeline.sim.workload.SEER_WORKLOADS``: requests, group
size, mean and limit of output lengths from the paper's statistics), 32 instances, each one
H200 running the workload's cost-table shape with KV capacity = H200 memory x 0.9 - weights.
Policies, cumulative as in Seer's ablation:
- ``baseline``: veRL-style -- whole groups pinned round-robin, run to completion, the
  engine queues and preempts; KV stays on its instance (``kv_pool="local"``);
- ``divided``: chunks of ``chunk_size`` through the global buffer, FIFO; Seer's global KV
  pool (``kv_pool="global"``: a chunk may move without re-prefill);
- ``context_aware``: + Algorithm 2 (probes first, then longest estimated group first);
- ``seer``: + adaptive grouped speculative decoding (MBA over real-suffix-tree acceptance);
- ``oracle``: longest true remaining length first (global pool, no speculation).
All results are simulated: the table is measured, the workload synthetic, the sibling
similarity a stated model (``pipeline.sim.acceptance``). Speed: the instance model prices
runs of up to ``max_steps`` decode steps per event, so an iteration costs events per chunk
and per stretch, not per token.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.records.metrics import compute_metrics
from pipeline.records.plot import drawn, maybe_plot_timeline
from pipeline.records.report import results_table, write_results
from pipeline.sim.acceptance import measure_acceptance
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, simulate
from pipeline.sim.workload import SEER_WORKLOADS, seer_requests
from transport.messages import RolloutRecord

__all__ = [
    "POLICIES",
    "QUICK_SCALE",
    "SEER_PUBLISHED",
    "SEER_WORKLOADS",
    "run",
]

# (scheduler policy, speculation, KV pool) per ablation step
POLICIES: dict[str, tuple[str, str, str]] = {
    "baseline": ("baseline", "off", "local"),
    "divided": ("divided", "off", "global"),
    "context_aware": ("context_aware", "off", "global"),
    "seer": ("context_aware", "group", "global"),
    "oracle": ("oracle", "off", "global"),
}
# Seer's Table/Figure numbers (REFERENCES.md): throughput vs veRL, tail time cut
SEER_PUBLISHED = {
    "moonlight": {"divided": 1.41, "context_aware": 1.47, "seer": 1.90, "tail_cut": 0.84},
    "qwen2-vl-72b": {"divided": 1.42, "context_aware": 1.56, "seer": 2.04, "tail_cut": 0.94},
    "kimi-k2": {"divided": 1.16, "context_aware": 1.27, "seer": 1.53, "tail_cut": 0.72},
}


def run_workload(
    name: str,
    *,
    num_instances: int = 32,
    chunk_size: int = 4096,
    max_batch: int = 256,
    scale: float = 1.0,
    seed: int = 0,
    policies: tuple[str, ...] = tuple(POLICIES),
    console: Console | None = None,
) -> tuple[dict[str, Any], dict[str, RolloutRecord]]:
    w = SEER_WORKLOADS[name]
    reqs = seer_requests(w, seed=seed, scale=scale)
    cost = CostModel.builtin(w.shape)
    acceptance = measure_acceptance()
    out: dict[str, Any] = {}
    records: dict[str, RolloutRecord] = {}
    for pol in policies:
        sched, spec, pool = POLICIES[pol]
        cfg = SimConfig(
            num_instances=num_instances,
            max_batch=max_batch,
            kv_capacity=w.kv_capacity,
            chunk_size=chunk_size,
            kv_pool=pool,  # type: ignore[arg-type]
            spec=spec,  # type: ignore[arg-type]
            seed=seed,
        )
        res = simulate(reqs, sched, cfg, cost, acceptance=acceptance)
        m = compute_metrics(res.record)
        out[pol] = {
            "throughput_tok_s": m["throughput_tok_s"],
            "tail_s": m["tail_s"],
            "preemptions": m["num_preemptions"],
            "makespan_s": m["makespan_s"],
            "idle_fraction": m["idle_fraction"],
            "mean_accept_len": m["mean_accept_len"],
            "num_recomputed_tokens": m["num_recomputed_tokens"],
            "chunks_moved": m["chunks_moved"],
            "starvation_picks": res.counters["starvation_picks"],
            "sim_wall_s": res.wall_s,
            "sim_cpu_s": res.cpu_s,
            "sim_events": res.num_events,
        }
        records[pol] = res.record
        if console:
            console.print(
                f"  {name} {pol}: makespan {m['makespan_s']:.0f} s, tail {m['tail_s']:.0f} s, "
                f"{m['num_preemptions']} preemptions (simulated in {res.wall_s:.1f} s, "
                f"{res.cpu_s:.1f} s CPU)"
            )
    base = out["baseline"]["throughput_tok_s"] if "baseline" in out else None
    ratios = {p: v["throughput_tok_s"] / base for p, v in out.items()} if base else {}
    workload = {
        "num_requests": len(reqs),
        "group_size": w.group_size,
        "mean_output": sum(r.output_len for r in reqs) / len(reqs),
        "max_output": w.max_output,
        "prompt_len": w.prompt_len,
        "cost_shape": w.shape,
        "kv_capacity_tokens": w.kv_capacity,
        "note": w.note,
    }
    summary = {"policies": out, "ratios": ratios, "workload": workload}
    if "oracle" in out and "context_aware" in out:
        summary["context_aware_of_oracle"] = (
            out["context_aware"]["throughput_tok_s"] / out["oracle"]["throughput_tok_s"]
        )
    if "baseline" in out and "seer" in out and out["baseline"]["tail_s"] > 0:
        summary["seer_tail_cut"] = 1 - out["seer"]["tail_s"] / out["baseline"]["tail_s"]
    summary["seer_published"] = SEER_PUBLISHED[name]
    return summary, records


def run(
    json_path: str | None = None,
    *,
    workloads: tuple[str, ...] = tuple(SEER_WORKLOADS),
    scale: float = 1.0,
    chunk_size: int = 4096,
    num_instances: int = 32,
    max_batch: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    console = Console(width=150)
    start = time.perf_counter()
    result: dict[str, Any] = {"workloads": {}}
    timelines: dict[str, RolloutRecord] = {}
    for name in workloads:
        if name not in SEER_WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; valid: {', '.join(SEER_WORKLOADS)}")
        summary, records = run_workload(
            name,
            num_instances=num_instances,
            chunk_size=chunk_size,
            max_batch=max_batch,
            scale=scale,
            seed=seed,
            console=console,
        )
        result["workloads"][name] = summary
        for pol in ("baseline", "seer"):
            if pol in records:
                timelines[f"{name} {pol} (instances 0-{_PLOTTED - 1})"] = _first_lanes(records[pol])
    result["settings"] = {
        "num_instances": num_instances,
        "chunk_size": chunk_size,
        "max_batch": max_batch,
        "scale": scale,
        "seed": seed,
        "acceptance": measure_acceptance().as_dict(),
        "label": "simulated",
        "wall_s": time.perf_counter() - start,
    }
    console.print(_table(result))
    folder = Path(json_path).parent if json_path else Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    out = Path(json_path) if json_path else folder / "sim-seer.json"
    write_results(out, result)  # first: the plot of a big run takes a while
    png = maybe_plot_timeline(timelines, folder / "sim-seer-timeline.png", color_by="length")
    result["timeline_png"] = str(png) if png else None
    write_results(out, result)
    console.print(f"wrote {out} and {drawn(png)}")
    return result


_PLOTTED = 4  # instances drawn per panel (drawing every chunk of 32 takes minutes)


def _first_lanes(record: RolloutRecord) -> RolloutRecord:
    """The record's first `_PLOTTED` instances (its requests kept: same makespan and tail)."""
    n = min(_PLOTTED, record.num_instances)
    chunks = tuple(c for c in record.chunks if c.instance < n)
    return dataclasses.replace(record, chunks=chunks, num_instances=n)


def _table(result: dict[str, Any]) -> Table:
    cols = (
        "workload",
        "policy",
        "tok/s",
        "vs baseline",
        "Seer paper",
        "tail s",
        "preempt",
        "accept len",
    )
    rows = []
    for name, w in result["workloads"].items():
        for pol, p in w["policies"].items():
            paper = w["seer_published"].get(pol)
            rows.append(
                (
                    name,
                    pol,
                    f"{p['throughput_tok_s']:.0f}",
                    f"{w['ratios'].get(pol, float('nan')):.2f}x",
                    f"{paper:.2f}x" if paper else ("1.00x" if pol == "baseline" else "-"),
                    f"{p['tail_s']:.0f}",
                    str(p["preemptions"]),
                    f"{p['mean_accept_len']:.2f}",
                )
            )
    title = "seer sim seer (SIMULATED: 32 x H200 cost tables, Seer's workload statistics)"
    return results_table(title, cols, rows)


#: `seer sim seer --quick`: one workload at this fraction of its groups (a smoke test)
QUICK_SCALE = 0.02
