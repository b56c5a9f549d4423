"""A generator that missed a weight version gets it when it comes back, then work in the
same rollout (issue 15 part 3, second bullet): real processes (the built-in engine on a tiny
model, the real trainer and scheduler), ZeroMQ over ipc, SIGSTOP / SIGCONT.

Before this, a generator that missed version k stayed without work until a later
publication reached it; the test's rollout after the resume then ran on generator 0 alone.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path

import anyio
import pytest

from actors.generator import GeneratorOptions
from actors.generator.options import SpecConfig
from actors.model import ModelOptions
from actors.trainer.options import TrainerOptions
from pipeline.config import PipelineConfig, Topology
from pipeline.launch import Cluster
from pipeline.rl.config import RunConfig, rl_topology
from pipeline.rollout import Rollout, RolloutResult
from transport.messages import (
    ActorStats,
    GetLoad,
    GetStats,
    LoadReport,
    PromptSpec,
    SamplingSpec,
    TrainReport,
    TrainSampleSpec,
    TrainStep,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

VOCAB = 32
TINY = GeneratorOptions(
    model=ModelOptions(
        hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64, max_context=64
    ),
    max_batch=8,
    kv_budget_tokens=4096,
    spec=SpecConfig(mode="off"),
)
SAMPLING = SamplingSpec(max_new_tokens=48, seed=5)  # no stop token: every sample runs 48


class NoStopTask:
    """Just the vocabulary: the test scores samples itself."""

    name = "nostop"
    vocab_size = VOCAB
    eos_token_id = None


def _config(tmp_path: Path) -> PipelineConfig:
    run = RunConfig(
        generator=TINY,
        num_generators=2,
        chunk_size=8,
        warm_start_steps=0,
        trainer=TrainerOptions(micro_batch_size=64, mini_batch_size=1024, lr=1e-2),
        out_dir=str(tmp_path),
    )
    cfg = rl_topology(run, "", NoStopTask())  # type: ignore[arg-type]
    probe = {"health_interval_s": 0.25, "health_timeout_s": 1.0}  # a frozen one: lost in ~1 s
    actors = tuple(
        dataclasses.replace(g, options={**g.options, **probe}) if g.role == "scheduler" else g
        for g in cfg.topology.actors
    )
    return dataclasses.replace(cfg, topology=Topology(actors=actors))


def _prompts(n: int, tag: str) -> list[PromptSpec]:
    return [PromptSpec(prompt_id=f"{tag}{i}", token_ids=(1, i % 30 + 1, 2)) for i in range(n)]


def _train_step(iteration: int, result: RolloutResult) -> TrainStep:
    samples = tuple(
        TrainSampleSpec(
            prompt_ids=(1, 2),
            completion_ids=s.token_ids,
            old_logprobs=s.logprobs,
            reward=float(s.index % 2),  # not flat: every group trains
            group_id=s.group_id,
            weight_versions=s.weight_versions,
        )
        for g in result.groups
        for s in g.samples
    )
    return TrainStep(iteration=iteration, samples=samples)


async def _num_chunks(cluster: Cluster, index: int) -> float:
    stats = await cluster.call("generator", index, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    return stats.counters["num_chunks"]


async def _version(cluster: Cluster, index: int) -> int:
    reply = await cluster.call("generator", index, GetLoad(), timeout=10)
    assert isinstance(reply, LoadReport)
    return reply.load.weight_version


async def test_a_generator_that_missed_a_version_gets_it_and_work_in_the_same_rollout(
    tmp_path: Path,
) -> None:
    async with Rollout(_config(tmp_path)) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        gen1 = cluster.status[("generator", 1)].process
        assert gen1 is not None
        with anyio.fail_after(240):
            first = await rollout.generate_with_record(_prompts(8, "a"), 2, SAMPLING)
            os.kill(gen1.pid, signal.SIGSTOP)  # frozen across the publication of version 1
            try:
                report = await rollout.call_actor("trainer", _train_step(0, first))
                assert isinstance(report, TrainReport) and report.version == 1
                assert await _version(cluster, 0) == 1
                before = await _num_chunks(cluster, 0)
                async with anyio.create_task_group() as tg:
                    results: list[RolloutResult] = []

                    async def roll() -> None:
                        prompts = _prompts(48, "b")
                        results.append(await rollout.generate_with_record(prompts, 2, SAMPLING))

                    tg.start_soon(roll)
                    while await _num_chunks(cluster, 0) == before:  # the rollout is under way
                        await anyio.sleep(0.05)
                    os.kill(gen1.pid, signal.SIGCONT)
            finally:
                os.kill(gen1.pid, signal.SIGCONT)
            [second] = results
            assert await _version(cluster, 1) == 1  # the trainer pushed version 1 to it
            # it served chunks of this rollout, all at version 1 (so did everyone: the
            # trainer refuses a sample with any other version)
            mine = [c for c in second.record.chunks if c.instance == 1]
            assert mine, "generator 1 got no work after it came back"
            assert {c.weight_version for c in second.record.chunks} == {1}
            # no sample lost or duplicated: 96 samples, each 48 tokens, each token from
            # exactly one recorded chunk
            samples = [s for g in second.groups for s in g.samples]
            assert len(samples) == 96 and len({s.request_id for s in samples}) == 96
            assert all(len(s.token_ids) == 48 and s.finish_reason == "length" for s in samples)
            per_request: dict[str, int] = {}
            for c in second.record.chunks:
                per_request[c.request_id] = per_request.get(c.request_id, 0) + c.num_new_tokens
            assert per_request == {s.request_id: 48 for s in samples}
            # the trainer's off-policy refusal does not fire on these samples
            report = await rollout.call_actor("trainer", _train_step(1, second))
            assert isinstance(report, TrainReport) and report.version == 2
        total = len(second.record.chunks)
        print(f"generator 1 served {len(mine)} of {total} chunks after rejoining")
