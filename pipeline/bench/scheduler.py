"""`seer bench scheduler`: the live control plane at request rates a model cannot reach here.

The real splitter, estimator and scheduler actors run as local processes over real ipc
sockets and drive N stand-in generators (`pipeline.bench.standin.InstantGenerator`) that
answer every chunk the moment it arrives, so the control plane alone sets the pace. For
N = 2, 8 and 32 generators, one topology each, a warm-up rollout and then `repeats`
rollouts (medians reported) of the same workload under the context-aware policy: 512
prompts x 4 samples (quick: 32 x 4), every sample forced to exactly `CHUNKS_PER_REQUEST`
chunks of `CHUNK_SIZE` tokens, so a rollout is 8,192 chunk dispatches (quick: 512).

Reported per N (JSON `{"instances": {"2": {...}, "8": {...}, "32": {...}}}`):

- `chunks_per_s`: chunk dispatches / the driver's wall time for the rollout (from sending
  the prompt batch to receiving `RolloutFinished`, samples and record included);
- `p50_ms`, `p99_ms`: per-chunk scheduler turnaround: from the moment a generator
  finished chunk k of a request (its `end_s`) to the moment the scheduler dispatched chunk
  k + 1 of the same request (its `dispatched_s`). The generators answer at once, so this is
  the scheduler's inbox queueing plus its handling; in this closed loop it is about the
  chunks in flight divided by the dispatch rate (Little's law), not a per-message cost;
- `sched_cpu_us_per_chunk`: the scheduler process's CPU time (user + system, from
  /proc/<pid>/stat, 10 ms ticks) over the rollout / chunk dispatches: its service time;
  `gen_cpu_us_per_chunk` the same summed over the N stand-ins (they share the 2 cores);
- `round_trip_p50_ms`: dispatch to the generator's answer (sockets and generator queue);
- `makespan_chunks_per_s`: chunk dispatches / the record's makespan (the scheduler's start
  to the last chunk's end: without the rollout's setup and its final, large
  `RolloutFinished` message).

`--profile DIR` also writes a cProfile of the scheduler process per N
(`scheduler-<N>.prof`, via `SEER_PROFILE`; see `pipeline.cli.actor`), slower while it runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from pipeline.bench.standin import KIND
from pipeline.launch import Cluster
from pipeline.records.report import results_table, write_results
from pipeline.rollout.api import Rollout, rollout_config
from transport.messages import PromptSpec, RolloutRecord, SamplingSpec

INSTANCES = (2, 8, 32)
CHUNK_SIZE = 128
CHUNKS_PER_REQUEST = 4
GROUP_SIZE = 4
PROMPT_LEN = 16
MAX_BATCH = 32  # slots per stand-in: the scheduler's max_running_per_instance


def workload(num_prompts: int) -> tuple[list[PromptSpec], SamplingSpec]:
    """Prompts whose every sample is exactly CHUNKS_PER_REQUEST chunks long."""
    length = CHUNK_SIZE * CHUNKS_PER_REQUEST
    prompts = [
        PromptSpec(
            prompt_id=f"p{i}",
            token_ids=tuple((i * 7 + j) % 200 + 1 for j in range(PROMPT_LEN)),
            forced_lens=(length,) * GROUP_SIZE,
        )
        for i in range(num_prompts)
    ]
    sampling = SamplingSpec(temperature=1.0, seed=0, ignore_eos=True, max_new_tokens=length)
    return prompts, sampling


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pids(cluster: Cluster, role: str) -> list[int]:
    return [s.pid for (r, _), s in cluster.status.items() if r == role]


def _percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def chunk_latencies(record: RolloutRecord) -> tuple[list[float], list[float]]:
    """(turnarounds: a chunk's end to its request's next dispatch; dispatch-to-answer round
    trips), in seconds."""
    by_request: dict[str, list[Any]] = defaultdict(list)
    for c in record.chunks:
        by_request[c.request_id].append(c)
    turnaround, round_trip = [], []
    for chunks in by_request.values():
        chunks.sort(key=lambda c: c.chunk_seq)
        round_trip += [c.end_s - c.dispatched_s for c in chunks]
        turnaround += [b.dispatched_s - a.end_s for a, b in itertools.pairwise(chunks)]
    return turnaround, round_trip


def chunks_per_request(record: RolloutRecord) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for c in record.chunks:
        counts[c.request_id] += 1
    return dict(counts)


async def measure(num_generators: int, num_prompts: int, repeats: int) -> dict[str, Any]:
    """Warm up, then `repeats` rollouts on one topology; medians and the last run's checks."""
    config = rollout_config(
        num_generators=num_generators,
        chunk_size=CHUNK_SIZE,
        generator={"max_batch": MAX_BATCH},
        generator_kind=KIND,
    )
    prompts, sampling = workload(num_prompts)
    runs: list[dict[str, Any]] = []
    async with Rollout(config) as rollout:
        assert rollout.cluster is not None
        sched = _pids(rollout.cluster, "scheduler")[0]
        gens = _pids(rollout.cluster, "generator")
        await rollout.generate(prompts[: max(1, num_prompts // 8)], GROUP_SIZE, sampling)
        for _ in range(repeats):
            cpu0, gen0 = cpu_seconds(sched), sum(map(cpu_seconds, gens))
            start = time.perf_counter()
            result = await rollout.generate_with_record(prompts, GROUP_SIZE, sampling)
            wall = time.perf_counter() - start
            cpu, gen_cpu = cpu_seconds(sched) - cpu0, sum(map(cpu_seconds, gens)) - gen0
            record = result.record
            n = len(record.chunks)
            turnaround, round_trip = chunk_latencies(record)
            per_request = chunks_per_request(record)
            runs.append(
                {
                    "chunks_per_s": n / wall,
                    "makespan_chunks_per_s": n / record.makespan_s,
                    "p50_ms": 1e3 * _percentile(turnaround, 0.50),
                    "p99_ms": 1e3 * _percentile(turnaround, 0.99),
                    "sched_cpu_us_per_chunk": 1e6 * cpu / n,
                    "gen_cpu_us_per_chunk": 1e6 * gen_cpu / n,
                    "round_trip_p50_ms": 1e3 * _percentile(round_trip, 0.50),
                    "wall_s": wall,
                    "num_chunks": n,
                    "num_requests": len(record.requests),
                    "chunks_per_request": sorted(set(per_request.values())),
                    "finish_reasons": sorted(
                        {s.finish_reason for g in result.groups for s in g.samples}
                    ),
                }
            )
    out = {
        k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], float)
    }
    last = runs[-1]
    out |= {
        k: last[k] for k in ("num_chunks", "num_requests", "chunks_per_request", "finish_reasons")
    }
    return out | {"repeats": repeats, "chunks_per_s_runs": [r["chunks_per_s"] for r in runs]}


def _table(summary: dict[str, Any]) -> Table:
    title = (
        f"seer bench scheduler (stand-in generators answer at once; medians of "
        f"{summary['repeats']}; load {summary['loadavg_before'][0]:.2f})"
    )
    cols = (
        "generators",
        "chunks",
        "wall s",
        "chunks/s",
        "p50 ms",
        "p99 ms",
        "sched CPU us/chunk",
        "gens CPU us/chunk",
    )
    rows = [
        (
            n,
            str(m["num_chunks"]),
            f"{m['wall_s']:.2f}",
            f"{m['chunks_per_s']:.0f}",
            f"{m['p50_ms']:.1f}",
            f"{m['p99_ms']:.1f}",
            f"{m['sched_cpu_us_per_chunk']:.0f}",
            f"{m['gen_cpu_us_per_chunk']:.0f}",
        )
        for n, m in summary["instances"].items()
    ]
    return results_table(title, cols, rows)


def run(
    json_path: str | None = None,
    quick: bool = False,
    repeats: int | None = None,
    profile: str | None = None,
    instances: tuple[int, ...] = INSTANCES,
) -> dict[str, Any]:
    console = Console(width=140)
    repeats = repeats or (1 if quick else 3)
    num_prompts = 32 if quick else 512
    summary: dict[str, Any] = {
        "instances": {},
        "repeats": repeats,
        "num_requests": num_prompts * GROUP_SIZE,
        "chunk_size": CHUNK_SIZE,
        "chunks_per_request": CHUNKS_PER_REQUEST,
        "max_running_per_instance": MAX_BATCH,
        "policy": "context_aware",
        "cpus": os.cpu_count(),
        "loadavg_before": list(os.getloadavg()),
    }
    for n in instances:
        if profile:
            Path(profile).mkdir(parents=True, exist_ok=True)
            os.environ["SEER_PROFILE"] = f"scheduler:{Path(profile) / f'scheduler-{n}.prof'}"
        try:
            with console.status(f"{n} generators: {repeats} rollouts"):
                summary["instances"][str(n)] = anyio.run(measure, n, num_prompts, repeats)
        finally:
            os.environ.pop("SEER_PROFILE", None)
        m = summary["instances"][str(n)]
        console.print(f"{n} generators: {m['chunks_per_s']:.0f} chunks/s")
    summary["loadavg_after"] = list(os.getloadavg())
    console.print(_table(summary))
    if json_path:
        write_results(json_path, summary)
        console.print(f"wrote {json_path}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench scheduler`'s own flags (beside --json and --quick)."""
    parser.add_argument("--repeats", type=int, help="runs per variant (the median is reported)")
    parser.add_argument("--profile", help="write a cProfile of the scheduler here")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench scheduler` from its parsed flags."""
    run(args.json, quick=args.quick, repeats=args.repeats, profile=args.profile)
