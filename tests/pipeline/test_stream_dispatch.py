"""`seer run --trainer-ranks 2` with direct dispatch (the scheduler scores each sample where
it finishes and sends it straight to its rank) against the driver path (the driver gathers,
scores, then sends) on the same seeds, over real processes, on a task named by import path:
the same rewards and reward errors, the same loss and gradient norm within float tolerance,
the same weight versions; every sample reaches exactly one rank; the driver of the direct
path never holds a token. A rank that dies fails the next streamed rollout with a reason
naming it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tests.pipeline.toytask  # noqa: F401  (registers the say7 task here too)
from actors.drafts.options import SpecConfig
from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.config import ActorGroup, Topology
from pipeline.rl.config import RUN_TRAINER, RunConfig
from pipeline.rl.loop import train
from pipeline.rl.ranks import stream_spec, train_streamed
from pipeline.rollout.api import Rollout, RolloutError, rollout_config
from pipeline.tasks import get_task
from tests.pipeline.tiny import TINY_MODEL
from transport.errors import PeerGone
from transport.messages import GetStats, PromptSpec, SamplingSpec, StreamToRanks

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROMPTS, GROUP = 4, 4
MODEL = ModelOptions(
    hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64, max_context=64
)


def config(tmp_path: Path, dispatch: str) -> RunConfig:
    return RunConfig(
        # by import path, with the default scorer: the scheduler builds the same task from
        # the same string; its reward raises on some samples (scored 0 and counted)
        task="tests.pipeline.toytask:FlakySeven",
        iterations=2,
        prompts_per_iteration=PROMPTS,
        group_size=GROUP,
        max_new_tokens=6,
        generator=GeneratorOptions(model=MODEL, max_batch=16, spec=SpecConfig(mode="off")),
        warm_start_steps=0,
        eval_prompts=0,
        trainer=dataclasses.replace(RUN_TRAINER, lr=3e-2),
        seed=4,
        num_generators=1,
        checkpoint_every=0,
        trainer_ranks=2,
        dispatch=dispatch,  # type: ignore[arg-type]
        out_dir=str(tmp_path / dispatch),
    )


@pytest.mark.timeout(400)
async def test_direct_dispatch_trains_like_the_driver_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Any] = []  # what the direct path's driver got back from each rollout
    original = Rollout.generate_with_record

    async def spy(self: Rollout, *args: Any, **kw: Any) -> Any:
        result = await original(self, *args, **kw)
        seen.append(result)
        return result

    monkeypatch.setattr(Rollout, "generate_with_record", spy)
    # no timeline drawn after each iteration (tests/pipeline/test_rl_loop.py checks it)
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    direct = await train(config(tmp_path, "direct"))
    streamed, seen[:] = list(seen), []
    driver = await train(config(tmp_path, "driver"))

    assert [r["weight_version"] for r in direct] == [r["weight_version"] for r in driver] == [1, 2]
    for d, c in zip(direct, driver, strict=True):
        assert (d["dispatch"], c["dispatch"]) == ("direct", "driver")
        assert d["reward_mean"] == pytest.approx(c["reward_mean"], abs=1e-12)
        assert d["output_tokens"] == c["output_tokens"]
        for key in ("loss", "grad_norm", "num_tokens", "reward_mean", "num_samples"):
            assert d[f"train_{key}"] == pytest.approx(c[f"train_{key}"], rel=1e-4, abs=1e-6), key
        # every sample on exactly one rank, none dropped (no engine errors here)
        assert sum(d["samples_per_rank"]) == sum(c["samples_per_rank"]) == PROMPTS * GROUP
        assert d["num_error_samples"] == 0 and d["train_num_dropped"] == 0
        assert d["num_reward_errors"] == c["num_reward_errors"]  # counted where scored
    assert sum(r["num_reward_errors"] for r in direct) > 0  # the count is not vacuous
    assert any(r["train_grad_norm"] > 0 for r in direct)  # not a vacuous comparison

    assert [r.stream is None for r in seen] == [True, True]
    for result in streamed:
        summary = result.stream
        assert summary is not None
        ids = [rid for rank in summary.rank_request_ids for rid in rank]
        every = {s.request_id for g in result.groups for s in g.samples}
        assert sorted(ids) == sorted(every) and len(ids) == PROMPTS * GROUP  # exactly once
        assert all(len(rank) > 0 for rank in summary.rank_request_ids)
        assert max(summary.num_tokens) <= 2 * min(summary.num_tokens)  # token-balanced
        # the driver got rewards and lengths, no token arrays
        assert all(s.token_ids == () and s.logprobs == () for g in result.groups for s in g.samples)
        assert set(summary.rewards) == every
        lens = {r.request_id: r.output_len for r in result.record.requests}
        assert summary.output_lens == lens


def test_dispatch_option_is_checked() -> None:
    with pytest.raises(ValueError, match="dispatch"):
        dataclasses.replace(RunConfig(), dispatch="scatter")  # type: ignore[arg-type]


@pytest.mark.timeout(180)
async def test_a_streamed_rollout_fills_every_shard_and_a_dead_rank_fails_it(
    tmp_path: Path,
) -> None:
    """Ranks that only hold what they receive (`ShardRank`, the real `ShardBuffer`): each
    rank's shard is complete against its layout; then rank 1 is killed and the next
    streamed rollout fails with a reason naming it instead of losing its samples."""
    task = get_task("countdown")
    gen = {
        "model": TINY_MODEL | {"vocab_size": task.vocab_size},
        "max_batch": 8, "spec": {"mode": "off"}, "eos_token_id": task.eos_token_id,
    }  # fmt: skip
    base = rollout_config(
        num_generators=1, generator=gen, scheduler={"scorer": RunConfig().scorer},
        run_dir=str(tmp_path),
    )  # fmt: skip
    ranks = ActorGroup(role="trainer", kind="tests.actors.toys:ShardRank", count=2)
    config = dataclasses.replace(base, topology=Topology(actors=(*base.topology.actors, ranks)))
    prompts = task.sample_prompts(PROMPTS, np.random.default_rng(0))
    ids = [f"q{i}" for i in range(PROMPTS)]
    specs = [
        PromptSpec(prompt_id=i, token_ids=p.token_ids) for i, p in zip(ids, prompts, strict=True)
    ]
    sampling = SamplingSpec(max_new_tokens=8, seed=1, stop_token_ids=(task.eos_token_id,))

    def announce(iteration: int) -> StreamToRanks:
        return stream_spec(
            task, ids, prompts, iteration=iteration, num_ranks=2, group_size=GROUP,
        )  # fmt: skip

    async with Rollout(config, mode="local") as rollout:
        result = await rollout.generate_with_record(specs, GROUP, sampling, stream=announce(0))
        assert result.stream is not None
        reports = await train_streamed(rollout, result.stream, iteration=0, sampling=sampling)
        held = [int(r.stats["num_local_samples"]) for r in reports]
        assert held == [len(ids) for ids in result.stream.rank_request_ids]
        assert sum(held) == PROMPTS * GROUP
        assert [r.stats["num_tokens"] for r in reports] == list(result.stream.num_tokens)

        assert rollout.cluster is not None
        victim = rollout.cluster.status[("trainer", 1)].process
        assert victim is not None
        victim.kill()
        victim.wait(10)
        with pytest.raises(PeerGone):  # its death reached the sockets of its peers
            await rollout.cluster.call("trainer", 1, GetStats(), timeout=30)
        with pytest.raises(RolloutError, match="rank 1"):
            await rollout.generate_with_record(specs, GROUP, sampling, stream=announce(1))
