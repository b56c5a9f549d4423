"""An iteration's samples reach a single-rank trainer in bounded messages: `TrainSamples`
calls ahead of the `TrainStep` (pipeline.rl.steps), trained as one step by the real actor."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.launch import launch_inprocess
from pipeline.launch.cluster import Cluster
from pipeline.rl.steps import batches, sample_bytes, send_train_step
from tests.actors.test_trainer_actor import config, samples
from transport.errors import RemoteError
from transport.messages import Message, SamplingSpec, TrainSamples, TrainSampleSpec, TrainStep

pytestmark = pytest.mark.anyio


def _spec(n: int) -> TrainSampleSpec:
    return TrainSampleSpec(
        prompt_ids=(1,) * n, completion_ids=(2,) * n, old_logprobs=(-1.0,) * n, reward=0.0,
        group_id="g", weight_versions=(0,),
    )  # fmt: skip


def test_batches_stay_under_the_budget_in_order() -> None:
    specs = [_spec(n) for n in (10, 200, 10, 10, 1000, 10)]
    budget = sample_bytes(specs[1]) + sample_bytes(specs[0])
    runs = list(batches(specs, budget))
    assert [s for run in runs for s in run] == specs
    assert all(sum(map(sample_bytes, r)) <= budget for r in runs if len(r) > 1)
    assert (specs[4],) in runs  # larger than the budget: alone
    assert list(batches([], 1)) == [()]
    with pytest.raises(ValueError, match="max_bytes"):
        list(batches(specs, 0))


class _Recorder:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sent: list[Message] = []

    async def call_actor(self, role: str, msg: Message, index: int = 0) -> Message:
        self.sent.append(msg)
        return await self.cluster.call(role, index, msg)


async def test_samples_sent_ahead_train_as_one_step(tmp_path: Path) -> None:
    specs = samples(0, (1.0, 0.0, 1.0, 0.0))
    async with launch_inprocess(config(tmp_path)) as cluster:
        with pytest.raises(RemoteError, match=r"counts 3 samples sent ahead.*holds 0"):
            await cluster.call("trainer", 0, TrainStep(iteration=0, samples=(), num_sent=3))
        recorder = _Recorder(cluster)
        report = await send_train_step(recorder, 0, specs, SamplingSpec(), max_bytes=1)
    assert [type(m) for m in recorder.sent] == [TrainSamples] * 3 + [TrainStep]
    last = recorder.sent[-1]
    assert isinstance(last, TrainStep) and (last.num_sent, len(last.samples)) == (3, 1)
    assert report.version == 1
    assert report.stats["num_samples"] == 4.0
