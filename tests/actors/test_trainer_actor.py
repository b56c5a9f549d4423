"""The trainer actor end to end (in-process, the real `TrainerActor`): the KL reference is
built at start, and a step that fails part-way leaves the weights, optimiser state and
version as they were, and the caller gets a typed error."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from actors.model import load_state_dict
from actors.model.options import ModelOptions
from pipeline.bench.fault_cases import failing_batch, own_logprob_group
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import launch_inprocess
from pipeline.launch.cluster import Cluster
from transport.errors import RemoteError
from transport.messages import SaveCheckpoint, TrainReport, TrainSampleSpec, TrainStep

pytestmark = pytest.mark.anyio

MODEL = ModelOptions(
    vocab_size=32, hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64,
    max_context=64, seed=4,
)  # fmt: skip


def config(tmp_path: Path, **options: Any) -> PipelineConfig:
    opts = {"model": dataclasses.asdict(MODEL), "micro_batch_size": 2, "lr": 1e-2, **options}
    group = ActorGroup(role="trainer", kind="trainer", options=opts)
    return PipelineConfig(
        topology=Topology(actors=(group,)), transport=TransportConfig(run_dir=str(tmp_path))
    )


def samples(version: int, rewards: tuple[float, ...], bad: int = -1) -> tuple[TrainSampleSpec, ...]:
    """One group on the starting model's own log-probabilities; sample `bad` gets an absurd
    (finite) one, whose importance ratio overflows: a non-finite loss (the injection that
    `seer bench faults`' `optimiser_step` case uses)."""
    return own_logprob_group(dataclasses.asdict(MODEL), version, rewards, bad)


async def train(
    cluster: Cluster, iteration: int, specs: tuple[TrainSampleSpec, ...]
) -> TrainReport:
    reply = await cluster.call("trainer", 0, TrainStep(iteration=iteration, samples=specs))
    assert isinstance(reply, TrainReport)
    return reply


async def test_kl_coef_builds_a_frozen_reference_and_trains(tmp_path: Path) -> None:
    async with launch_inprocess(config(tmp_path, kl_coef=0.5)) as cluster:
        first = await train(cluster, 0, samples(0, (1.0, 0.0, 1.0, 0.0)))
        second = await train(cluster, 1, samples(1, (0.0, 1.0, 0.0, 1.0)))
    assert (first.version, second.version) == (1, 2)
    assert first.stats["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # the reference = the start
    assert second.stats["kl_ref"] > 1e-6  # after one update the policy has moved from it


def _saved(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], int]:
    weights = load_state_dict(path / "model.safetensors")
    state = torch.load(path / "state.pt", weights_only=True)
    version = json.loads((path / "meta.json").read_text())["version"]
    return weights, state, version


async def test_a_step_failing_in_its_second_mini_batch_changes_nothing(tmp_path: Path) -> None:
    """Two mini-batches of two; the second holds a sample whose loss is non-finite. The first
    mini-batch's optimiser step has already run when it fails."""
    bad, rewards = failing_batch(seed=0)  # the trainer's seed: the last of mini-batch 2
    async with launch_inprocess(config(tmp_path, mini_batch_size=2, seed=0)) as cluster:
        await cluster.call("trainer", 0, SaveCheckpoint(path=str(tmp_path / "before"), iteration=0))
        with pytest.raises(RemoteError) as caught:
            await train(cluster, 0, samples(0, rewards, bad=bad))
        assert caught.value.kind == "TrainStepError"
        assert "non-finite loss" in caught.value.detail
        await cluster.call("trainer", 0, SaveCheckpoint(path=str(tmp_path / "after"), iteration=0))
        report = await train(cluster, 0, samples(0, rewards))  # still version 0: it trains
    before, after = _saved(tmp_path / "before"), _saved(tmp_path / "after")
    assert before[2] == after[2] == 0
    assert before[0].keys() == after[0].keys()
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert before[1]["optimizer"]["state"] == after[1]["optimizer"]["state"] == {}
    assert torch.equal(before[1]["rng_trainer"], after[1]["rng_trainer"])
    assert report.version == 1 and report.stats["num_optimizer_steps"] == 2


async def test_without_the_copy_a_failed_step_leaves_the_trainer_refusing(tmp_path: Path) -> None:
    """`restore_on_failure = false`: the first mini-batch's update stays in the weights under
    the old version, so the trainer refuses to step, publish or save them."""
    bad, rewards = failing_batch(seed=0)
    options = {"mini_batch_size": 2, "seed": 0, "restore_on_failure": False}
    async with launch_inprocess(config(tmp_path, **options)) as cluster:
        with pytest.raises(RemoteError, match="trainer now unusable"):
            await train(cluster, 0, samples(0, rewards, bad=bad))
        with pytest.raises(RemoteError, match="unusable since a failed step"):
            await train(cluster, 0, samples(0, rewards))
        save = SaveCheckpoint(path=str(tmp_path / "after"), iteration=0)
        with pytest.raises(RemoteError, match="unusable since a failed step"):
            await cluster.call("trainer", 0, save)
    assert not (tmp_path / "after").exists()
