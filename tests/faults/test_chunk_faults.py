"""Chunks that do not finish (issue 34 section 2), over real processes, ZeroMQ and ipc: a
chunk aborted by its server, a generator that fails every chunk, a result lost on the wire.

The generators are protocol-exact stand-ins (`pipeline.bench.faulty`) so that a rollout takes
a second; every other actor is the real one. Before the fixes an aborted chunk's partial
answer was kept as the sample's end (finish reason "abort", too few tokens), a generator
failing every chunk ended its samples in "abort"/"error", and a lost result stalled the
rollout until the driver's one-hour timeout (here: `fail_after`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from pipeline.config import PipelineConfig, TransportConfig
from pipeline.rollout import Group, Rollout, rollout_config
from transport.messages import ActorStats, GetStats, PromptSpec, SamplingSpec

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]
FAULTY = "pipeline.bench.faulty:"
SAMPLING = SamplingSpec(max_new_tokens=16, seed=0)  # 4 chunks of 4 tokens each


def _config(tmp_path: Path, kind: str, **scheduler: float) -> PipelineConfig:
    cfg = rollout_config(
        num_generators=2,
        chunk_size=4,
        generator_kind=FAULTY + kind,
        run_dir=str(tmp_path),
        scheduler={"health_interval_s": 0.1, **scheduler},
    )
    return PipelineConfig(
        topology=cfg.topology,
        transport=TransportConfig(run_dir=str(tmp_path)),
        run_id=cfg.run_id,
        ready_timeout_s=300.0,  # a loaded CI machine can take a minute to import
    )


def _prompts(n: int) -> list[PromptSpec]:
    return [PromptSpec(prompt_id=f"p{i}", token_ids=(1, i % 50 + 1, 7)) for i in range(n)]


async def _scheduler_counters(rollout: Rollout) -> dict[str, float]:
    assert rollout.cluster is not None
    stats = await rollout.cluster.call("scheduler", 0, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    return dict(stats.counters)


def _check_whole(groups: Sequence[Group]) -> None:
    samples = [s for g in groups for s in g.samples]
    assert {s.finish_reason for s in samples} == {"length"}
    assert all(len(s.token_ids) == len(s.logprobs) == 16 for s in samples)


async def test_an_aborted_chunk_is_run_again_from_its_committed_progress(tmp_path: Path) -> None:
    # every second chunk of each generator is aborted: a sample may meet several in a row
    config = _config(tmp_path, "AbortingGenerator", max_chunk_faults=20)
    async with Rollout(config) as rollout:
        with anyio.fail_after(60):
            groups = await rollout.generate(_prompts(20), 2, SAMPLING)
        _check_whole(groups)
        counters = await _scheduler_counters(rollout)
    assert counters["failed_chunks"] > 0 and counters["generators_lost"] == 0


async def test_a_generator_that_fails_every_chunk_is_lost_not_the_rollout(tmp_path: Path) -> None:
    async with Rollout(_config(tmp_path, "BrokenGenerator")) as rollout:
        with anyio.fail_after(60):
            result = await rollout.generate_with_record(_prompts(20), 2, SAMPLING)
            _check_whole(result.groups)
            counters = await _scheduler_counters(rollout)
            # generator 1 was lost after 3 failures in a row (its other chunks in flight
            # then came back stale), and gave no chunk to any sample
            assert 3 <= counters["failed_chunks"] <= 32
            assert {c.instance for c in result.record.chunks} == {0}
            # the next rollout tries it again (it answers with the current weights), loses
            # it again, and completes on generator 0
            again = await rollout.generate(_prompts(4), 2, SAMPLING)
        _check_whole(again)


async def test_a_result_lost_on_the_wire_is_requeued_at_its_deadline(tmp_path: Path) -> None:
    config = _config(tmp_path, "DroppingGenerator", chunk_deadline_floor_s=0.5)
    async with Rollout(config) as rollout:
        start = time.monotonic()
        with anyio.fail_after(60):  # before: the rollout waited for the lost results forever
            groups = await rollout.generate(_prompts(8), 2, SAMPLING)
        took = time.monotonic() - start
        _check_whole(groups)
        counters = await _scheduler_counters(rollout)
    assert counters["failed_chunks"] == 2  # one per generator
    assert took < 10, f"a lost result held the rollout for {took:.1f} s"
    print(f"2 lost results; rollout took {took:.2f} s with a 0.5 s deadline floor")
