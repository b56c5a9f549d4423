"""Trainer ranks as real processes (the local launcher, gloo) fed by the dispatcher over
real ZeroMQ: the 2-rank step matches the 1-rank step (one sample in error dropped on
both); a rank that dies mid-dispatch fails
the step with a DispatchError that names it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from actors.dispatcher.actor import Dispatcher
from actors.dispatcher.core import sample_data
from actors.dispatcher.options import DispatcherOptions
from actors.errors import DispatchError
from actors.model import ModelOptions, build_model
from actors.trainer import GRPOTrainer, TrainSample
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import launch_local
from pipeline.rl.config import free_port
from tests.actors import ranks_worker as w
from transport.errors import PeerGone
from transport.messages import GetStats, SamplingSpec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MODEL = {
    "vocab_size": 32, "hidden": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
    "intermediate": 64, "max_context": 64, "seed": 3,
}  # fmt: skip
OPTIONS = {"model": MODEL, "lr": 1e-2, "micro_batch_size": 3, "seed": 5, "num_threads": 1}


def config(tmp_path: Path, ranks: int) -> PipelineConfig:
    options = OPTIONS | {"dist_port": free_port(), "dist_timeout_s": 20.0}
    group = ActorGroup(role="trainer", kind="trainer", count=ranks, options=options)
    return PipelineConfig(
        topology=Topology(actors=(group,)),
        transport=TransportConfig(run_dir=str(tmp_path)),
        stop_timeout_s=3.0,
    )


def reference_stats(samples: list[TrainSample]) -> dict[str, float]:
    """GRPOTrainer.step in this process on the trainer actors' model and options."""
    t = GRPOTrainer(build_model(ModelOptions(**MODEL)), lr=1e-2, micro_batch_size=3, seed=5)
    return t.step(samples)


@pytest.mark.timeout(240)
async def test_two_rank_step_equals_one_rank_then_a_rank_dies_mid_dispatch(tmp_path: Path) -> None:
    samples = w.samples()
    random.Random(0).shuffle(samples)  # finishing order
    async with launch_local(config(tmp_path, 2)) as cluster:
        d = Dispatcher(
            cluster.mailbox, 2, w.GROUP_SIZE, iteration=0,
            sampling=SamplingSpec(), opts=DispatcherOptions(train_timeout_s=60),
        )  # fmt: skip
        errored = samples[-1].request_id  # ended in error: dropped on every rank
        for s in samples:
            await d.send(sample_data(s), is_error=s.request_id == errored)
        reports = await d.finish()
        assert [r.version for r in reports] == [1, 1]
        stats = [r.stats for r in reports]
        assert [s["num_dropped"] for s in stats] == [1.0, 1.0]
        assert sum(s["num_local_samples"] for s in stats) == len(samples) - 1
        assert stats[0]["num_samples"] == stats[1]["num_samples"] == len(samples) - 1
        assert stats[0]["token_imbalance"] <= 1.2
        # the objective and gradient norm of the 1-rank step on the same samples (the
        # weights then go through AdamW, whose sign-like first step magnifies rounding)
        expected = reference_stats([s for s in samples if s.request_id != errored])
        for key in ("loss", "grad_norm", "num_tokens", "num_skipped_groups", "reward_mean"):
            for got in stats:
                assert got[key] == pytest.approx(expected[key], rel=1e-4), key

        # iteration 1: rank 1 dies after half the samples went out
        d = Dispatcher(
            cluster.mailbox, 2, w.GROUP_SIZE, iteration=1,
            sampling=SamplingSpec(),
            opts=DispatcherOptions(send_timeout_s=5, train_timeout_s=30),
        )  # fmt: skip
        fresh = [w.dataclasses_replace_version(s, 1) for s in samples]
        for s in fresh[: len(fresh) // 2]:
            await d.send(sample_data(s))
        victim = cluster.status[("trainer", 1)].process
        assert victim is not None
        victim.kill()
        victim.wait(10)
        with pytest.raises(PeerGone):  # the dispatcher's socket to it has seen it go
            await cluster.call("trainer", 1, GetStats(), timeout=30)
        with pytest.raises(DispatchError, match="rank 1"):
            for s in fresh[len(fresh) // 2 :]:
                await d.send(sample_data(s))
            await d.finish()
