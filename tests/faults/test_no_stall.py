"""No stall on a dead peer (issue 15 part 3), over real processes, ZeroMQ and ipc.

The generators are protocol-exact stand-ins (`pipeline.bench.standin`, `pipeline.bench.faulty`)
so that thousands of requests take seconds; every other actor is the real one. Each test
hung (or failed) before its fix; each is bounded by `fail_after`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest
import torch

from pipeline.bench.faulty import BAD_TOKEN, chunks_taken
from pipeline.bench.standin import KIND
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import Cluster
from pipeline.rollout import Rollout, RolloutError, SchedulerLost, rollout_config
from transport.messages import ActorStats, GetStats, PromptSpec, SamplingSpec

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600)]
FAULTY = "pipeline.bench.faulty:"


def _config(
    tmp_path: Path,
    kind: str,
    *,
    drafts: bool = False,
    hwm: int = 1000,
    scheduler: dict[str, float] | None = None,
) -> PipelineConfig:
    cfg = rollout_config(
        num_generators=2, generator_kind=kind, run_dir=str(tmp_path), scheduler=scheduler
    )
    actors = cfg.topology.actors
    if drafts:
        actors = (*actors, ActorGroup(role="drafts", kind="drafts"))
    return PipelineConfig(
        topology=Topology(actors=actors),
        transport=TransportConfig(run_dir=str(tmp_path), hwm=hwm),
        run_id=cfg.run_id,
        ready_timeout_s=300.0,  # a loaded CI machine can take a minute to import
    )


def _prompts(n: int, first: int = 1) -> list[PromptSpec]:
    return [PromptSpec(prompt_id=f"p{i}", token_ids=(first, i % 50 + 1, 7)) for i in range(n)]


SAMPLING = SamplingSpec(max_new_tokens=4, seed=0)


async def _kill(cluster: Cluster, role: str, sig: signal.Signals = signal.SIGKILL) -> None:
    proc = cluster.status[(role, 0)].process
    assert proc is not None
    proc.send_signal(sig)
    if sig == signal.SIGKILL:
        with anyio.fail_after(10):
            while proc.poll() is None:
                await anyio.sleep(0.05)


async def _counters(cluster: Cluster, role: str, index: int = 0) -> dict[str, float]:
    stats = await cluster.call(role, index, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    return dict(stats.counters)


async def test_a_dead_estimator_and_draft_store_never_stall_the_scheduler(tmp_path: Path) -> None:
    # 12 rollouts x 400 groups x 2: 9,600 RequestFinished for the dead estimator, 4,800
    # GroupsClosed and 12 large GroupsOpened for the dead store. Before the fix the one-way
    # sends blocked at the high-water mark (64 here) once the kernel buffers were full.
    async with Rollout(_config(tmp_path, KIND, drafts=True, hwm=64)) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        await _kill(cluster, "estimator")
        await _kill(cluster, "drafts")
        with anyio.fail_after(150):
            for _ in range(12):
                groups = await rollout.generate(_prompts(400), 2, SAMPLING)
                assert len(groups) == 400
                assert all(len(s.token_ids) == 4 for g in groups for s in g.samples)
        scheduler = await _counters(cluster, "scheduler")
    assert scheduler["dropped_estimator"] > 0 and scheduler["dropped_drafts"] > 0


async def test_a_result_longer_than_its_chunk_is_refused_not_fatal(tmp_path: Path) -> None:
    prompts = [*_prompts(3), PromptSpec(prompt_id="bad", token_ids=(BAD_TOKEN, 1, 2))]
    async with Rollout(_config(tmp_path, FAULTY + "OverlongGenerator")) as rollout:
        with anyio.fail_after(60):  # before the fix: the request stayed "running" for good
            groups = await rollout.generate(prompts, 2, SAMPLING)
            reasons = {g.prompt_id: {s.finish_reason for s in g.samples} for g in groups}
            assert reasons["bad"] == {"error"}
            assert all(reasons[f"p{i}"] == {"length"} for i in range(3))
            assert all(not s.token_ids for s in groups[3].samples)  # nothing unchecked kept
            # the scheduler still serves: the next rollout completes
            again = await rollout.generate(_prompts(3), 2, SAMPLING)
            assert len(again) == 3
            # an oracle rollout without true lengths is refused, not silently degraded
            with pytest.raises(RolloutError, match="oracle"):
                await rollout.generate(_prompts(2), 2, SAMPLING, policy="oracle")
            assert rollout.cluster is not None
            counters = await _counters(rollout.cluster, "scheduler")
    assert counters["refused_results"] == 2


async def test_the_driver_fails_fast_when_the_scheduler_dies(tmp_path: Path) -> None:
    async with Rollout(_config(tmp_path, FAULTY + "SilentGenerator")) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        start = 0.0
        with anyio.fail_after(60):  # before the fix: the driver waited an hour
            async with anyio.create_task_group() as tg:

                async def kill_soon() -> None:
                    nonlocal start
                    await chunks_taken(cluster)  # the rollout is running
                    start = time.monotonic()
                    await _kill(cluster, "scheduler")

                tg.start_soon(kill_soon)
                with pytest.raises(SchedulerLost, match="scheduler-0 exited"):
                    await rollout.generate(_prompts(4), 2, SAMPLING)
        detected = time.monotonic() - start
        print(f"scheduler loss detected by the driver in {detected:.2f} s")
        assert detected < 30  # a bound on the test, not a speed claim


async def test_weights_reach_live_generators_and_a_returning_one_before_work(
    tmp_path: Path,
) -> None:
    state = {"w": torch.zeros(4)}
    probe = {"health_interval_s": 0.25, "health_timeout_s": 1.0}  # a frozen one: lost in ~1 s
    async with Rollout(
        _config(tmp_path, FAULTY + "WeightTakingGenerator", scheduler=probe)
    ) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        gen1 = cluster.status[("generator", 1)].process
        assert gen1 is not None
        with anyio.fail_after(120):
            await rollout.generate(_prompts(8), 2, SAMPLING)
            done = (await _counters(cluster, "generator", 1))["num_chunks"]
            assert done > 0
            os.kill(gen1.pid, signal.SIGSTOP)  # frozen: the scheduler declares it lost
            try:
                await rollout.generate(_prompts(8), 2, SAMPLING)
                await rollout.update_weights(state, version=1)  # before: waited on it, failed
            finally:
                os.kill(gen1.pid, signal.SIGCONT)
            # it answers again but holds version 0: it gets no work until it has version 1
            await rollout.generate(_prompts(8), 2, SAMPLING)
            assert (await _counters(cluster, "generator", 1))["num_chunks"] == done
            await rollout.update_weights(state, version=2)  # it is live again: it takes them
            groups = await rollout.generate(_prompts(32), 2, SAMPLING)
            assert {v for g in groups for s in g.samples for v in s.weight_versions} == {2}
            assert (await _counters(cluster, "generator", 1))["num_chunks"] > done
