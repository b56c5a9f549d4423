"""The demo's driver: a real multi-process topology doing real, checked work.

`python -m examples.demo` launches dispatcher, two workers and a collector as separate processes,
streams batches of random symmetric matrices through them, checks every eigenvalue
spectrum that comes back against a local computation, and prints what each actor did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from examples.demo.messages import BatchDone, WorkBatch
from pipeline.config import ActorGroup, PipelineConfig, Topology
from pipeline.launch import launch_local

ACTORS = "examples.demo.actors"


def demo_config(num_workers: int = 2, run_id: str | None = None) -> PipelineConfig:
    topology = Topology(
        actors=(
            ActorGroup(role="dispatcher", kind=f"{ACTORS}:Dispatcher"),
            ActorGroup(role="worker", kind=f"{ACTORS}:Worker", count=num_workers),
            ActorGroup(role="collector", kind=f"{ACTORS}:Collector"),
        )
    )
    return (
        PipelineConfig(topology=topology)
        if run_id is None
        else PipelineConfig(topology=topology, run_id=run_id)
    )


@dataclass(frozen=True, kw_only=True)
class DemoReport:
    num_batches: int
    num_matrices: int
    num_checked: int
    seconds: float
    shards_per_worker: dict[str, float]
    busy_s_per_worker: dict[str, float]


async def run_demo(
    config: PipelineConfig,
    *,
    num_batches: int = 24,
    batch_size: int = 64,
    dim: int = 48,
    num_shards: int = 4,
    max_in_flight: int = 4,
    console: Console | None = None,
) -> DemoReport:
    console = console or Console()
    gen = torch.Generator().manual_seed(0)
    expected: dict[int, torch.Tensor] = {}
    checked = 0
    start = time.perf_counter()
    async with launch_local(config) as cluster:
        console.print(
            f"[bold]{len(cluster.status)} actor processes ready[/] (run dir {config.run_dir})"
        )
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("batches", total=num_batches)
            sent = 0
            while checked < num_batches:
                while sent < num_batches and sent - checked < max_in_flight:
                    a = torch.randn(batch_size, dim, dim, generator=gen)
                    matrices = (a + a.transpose(1, 2)) / 2  # (N, D, D) symmetric
                    expected[sent] = torch.linalg.eigvalsh(matrices)
                    await cluster.send(
                        "dispatcher",
                        0,
                        WorkBatch(batch_id=sent, matrices=matrices, num_shards=num_shards),
                    )
                    sent += 1
                done = await cluster.recv(timeout=60)
                assert isinstance(done, BatchDone)
                values = torch.cat([torch.as_tensor(r.values) for r in done.results])
                if not torch.allclose(values, expected.pop(done.batch_id), atol=1e-4):
                    raise RuntimeError(f"batch {done.batch_id}: wrong eigenvalues came back")
                checked += 1
                progress.advance(task)
        stats = await cluster.stats()
    seconds = time.perf_counter() - start
    workers = {f"{s.role}-{s.index}": s for s in stats if s.role == "worker"}
    report = DemoReport(
        num_batches=num_batches,
        num_matrices=num_batches * batch_size,
        num_checked=checked,
        seconds=seconds,
        shards_per_worker={k: s.counters.get("shards", 0.0) for k, s in workers.items()},
        busy_s_per_worker={k: s.counters.get("busy_s", 0.0) for k, s in workers.items()},
    )
    _print(console, report, stats)
    return report


def _print(console: Console, report: DemoReport, stats: list) -> None:  # type: ignore[type-arg]
    table = Table(title="actors")
    for col in ("actor", "handled", "failed", "rejected", "counters"):
        table.add_column(col)
    for s in stats:
        counters = ", ".join(f"{k}={v:.3g}" for k, v in s.counters.items())
        table.add_row(
            f"{s.role}-{s.index}",
            str(s.num_handled),
            str(s.num_failed),
            str(s.num_rejected),
            counters,
        )
    console.print(table)
    console.print(
        f"{report.num_checked}/{report.num_batches} batches ({report.num_matrices} matrices) "
        f"computed across processes and checked in {report.seconds:.1f} s"
    )


def main(num_batches: int = 24) -> DemoReport:
    return anyio.run(lambda: run_demo(demo_config(), num_batches=num_batches))
