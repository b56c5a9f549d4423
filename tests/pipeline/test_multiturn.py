"""Multi-turn episodes through the real actors (in one process; the fault test with an
environment actor killed is in tests/faults/test_environment_loss.py), on the built-in engine: the
trajectory (observations appended as ids with loss mask 0, the model's tokens exactly what
one engine produces on the same context), budgets, and every environment fault ending its
episode with a counted reason, never a lost sample."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelOptions
from actors.trainer.wire import train_sample
from pipeline.rl.loop import episode_sample
from pipeline.rollout.api import Rollout, rollout_config
from pipeline.rollout.checks import InvalidEpisodeError
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import (
    ActorStats,
    EpisodeResult,
    EpisodeSpec,
    GetStats,
    PromptSpec,
    SampleResult,
    SamplingSpec,
)

pytestmark = pytest.mark.anyio

TINY: dict[str, Any] = {**TINY_GENERATOR, "kv_budget_tokens": 2048, "spec": {"mode": "off"}}
ENV = "tests.pipeline.multiturn_envs:make_counter_env"
GREEDY = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=60)


@functools.cache
def _engine() -> TorchEngine:
    return TorchEngine(
        LlamaModel.random(ModelOptions(**TINY["model"]).config(), seed=0),
        EngineConfig(max_batch=8, profile=False, num_threads=1),
    )


def _greedy(context: list[int], n: int) -> list[int]:
    """`n` greedy tokens after `context` from one engine in this process."""
    engine = _engine()
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    engine.add(ChunkRequest(f"ref{len(context)}:{context}", tuple(context), n, params=params))
    while engine.has_work():
        for chunk in engine.step().finished:
            return list(chunk.token_ids)
    raise AssertionError("no result")


def _config(tmp_path: Path, envs: int = 1, **sched: Any) -> Any:
    return rollout_config(
        num_generators=2, chunk_size=2, generator=TINY, run_dir=str(tmp_path),
        environments=envs, environment={"step_timeout_s": 1.0},
        scheduler={"environment_timeout_s": 5.0, "health_interval_s": 0.2, **sched},
    )  # fmt: skip


async def test_episodes_are_one_trajectory_with_observations_masked(tmp_path: Path) -> None:
    prompts = [
        PromptSpec(prompt_id="a", token_ids=(3, 4, 5), env_info={"first": 40}),
        PromptSpec(prompt_id="b", token_ids=(6, 7, 8, 9), env_info={"first": 41, "done_at": 2}),
        PromptSpec(prompt_id="c", token_ids=(5, 5), env_info={"first": 42, "text": True}),
    ]
    episode = EpisodeSpec(environment=ENV, max_turns=3, max_turn_tokens=3)
    async with Rollout(_config(tmp_path), mode="inprocess") as rollout:
        groups = await rollout.generate(prompts, 2, GREEDY, episode=episode)
        assert rollout.cluster is not None
        stats = await rollout.cluster.call("scheduler", 0, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    counters = dict(stats.counters)
    assert counters["episodes_max_turns"] == 4 and counters["episodes_done"] == 2
    for group, prompt in zip(groups, prompts, strict=True):
        turns = 2 if prompt.prompt_id == "b" else 3
        for s in group.samples:
            ep = s.episode
            assert ep is not None and ep.end_reason == ("done" if turns == 2 else "max_turns")
            assert ep.step_rewards == (0.25,) * turns and ep.reward == 0.25 * turns
            assert ep.stop_reasons == ("turn_length",) * turns
            # reset's 2 observation tokens, then per turn 3 actions and (but the last) 2 more
            expected_mask = [0, 0, *([1, 1, 1, 0, 0] * turns)[:-2]]
            assert list(ep.loss_mask) == expected_mask
            assert len(s.token_ids) == len(s.logprobs) == len(expected_mask)
            assert ep.turn_ends == tuple(2 + 5 * t + 3 for t in range(turns))
            obs = [t for t, m in zip(s.token_ids, ep.loss_mask, strict=True) if not m]
            first = prompt.env_info["first"]
            assert obs == [first, first] + [v for t in range(1, turns) for v in (60 + t,) * 2]
            assert [v for v, m in zip(ep.token_versions, ep.loss_mask, strict=True) if m] == [0] * (
                3 * turns
            )
            assert all(lp == 0.0 for lp, m in zip(s.logprobs, ep.loss_mask, strict=True) if not m)
        # greedy: both samples alike, and each turn's actions are what one engine makes of
        # the same context (observations prefilled after the parked KV, never re-tokenised)
        a, b = group.samples
        assert a.token_ids == b.token_ids
        context, tokens = list(prompt.token_ids), list(a.token_ids)
        for end in a.episode.turn_ends if a.episode else ():
            start = len(context) - len(prompt.token_ids)
            observation = tokens[start : end - 3]
            context += observation
            assert tokens[end - 3 : end] == _greedy(context, 3)
            context += tokens[end - 3 : end]


async def test_the_draft_store_holds_whole_trajectories(tmp_path: Path) -> None:
    """Grouped speculation across turns: every episode's actions and observations reach the
    draft store (no gap at a turn boundary), so siblings elsewhere draft later turns."""
    generator = {**TINY, "spec": {"mode": "group"}}
    config = rollout_config(
        num_generators=1, chunk_size=4, generator=generator, run_dir=str(tmp_path),
        environments=1, scheduler={"environment_timeout_s": 5.0},
    )  # fmt: skip
    prompts = [PromptSpec(prompt_id="a", token_ids=(3, 4, 5), env_info={"first": 40})]
    episode = EpisodeSpec(environment=ENV, max_turns=3, max_turn_tokens=3)
    async with Rollout(config, mode="inprocess") as rollout:
        groups = await rollout.generate(prompts, 3, GREEDY, episode=episode)
        assert rollout.cluster is not None
        stats = await rollout.cluster.call("drafts", 0, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    counters = dict(stats.counters)
    assert counters["gaps"] == 0  # (8 before: every append after the reset's observation)
    # every token of every trajectory (reset's observation, actions, observations) is there
    assert counters["appended_tokens"] == sum(len(s.token_ids) for s in groups[0].samples)


async def test_an_agent_function_drives_its_episode(tmp_path: Path) -> None:
    """The agent-function form: the agent calls generate itself; its observations and the
    model's actions make one trajectory, its return value is the reward; an agent that
    returns before any turn or raises fails its own episode; budgets still apply."""
    prompts = [
        PromptSpec(prompt_id="ok", token_ids=(3, 4, 5), env_info={"turns": 3}),
        PromptSpec(prompt_id="early", token_ids=(3, 4), env_info={"agent": "early"}),
        PromptSpec(prompt_id="raise", token_ids=(3, 4), env_info={"agent": "raise"}),
        PromptSpec(prompt_id="long", token_ids=(3, 4), env_info={"turns": 9}),
    ]
    agent = "tests.pipeline.multiturn_envs:make_agent_env"
    episode = EpisodeSpec(environment=agent, max_turns=4, max_turn_tokens=3)
    async with Rollout(_config(tmp_path), mode="inprocess") as rollout:
        groups = await rollout.generate(prompts, 2, GREEDY, episode=episode)
    by_prompt = {g.prompt_id: g.samples for g in groups}
    for s in by_prompt["ok"]:
        ep = s.episode
        assert ep is not None and (ep.end_reason, ep.reward) == ("done", 9.0)  # 3 x 3 actions
        assert ep.step_rewards == (0.0, 0.0, 9.0)
        assert list(ep.loss_mask) == [1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1]
        assert [t for t, m in zip(s.token_ids, ep.loss_mask, strict=True) if not m] == [71, 72, 72]
    for name, reason in [("early", "env_error"), ("raise", "env_error"), ("long", "max_turns")]:
        for s in by_prompt[name]:
            assert s.episode is not None and s.episode.end_reason == reason
            assert s.episode.reward == 0.0


async def test_environment_faults_end_their_episodes_with_a_reason(tmp_path: Path) -> None:
    faults = {"raise": "env_error", "sleep": "env_timeout", "bad": "bad_observation"}
    prompts = [
        PromptSpec(
            prompt_id=f, token_ids=(3, 4, 5), env_info={"fail_at": 2, "fail": f, "sleep_s": 5.0}
        )
        for f in faults
    ]
    prompts += [
        PromptSpec(prompt_id="huge", token_ids=(3, 4), env_info={"fail_at": 1, "fail": "huge"}),
        PromptSpec(prompt_id="long", token_ids=(3, 4), env_info={"obs_len": 20}),
    ]
    episode = EpisodeSpec(
        environment=ENV, max_turns=4, max_turn_tokens=3, max_observation_tokens=30,
        observation_cut="left",
    )  # fmt: skip
    sampling = SamplingSpec(temperature=1.0, seed=1, ignore_eos=True, max_new_tokens=40)
    async with Rollout(_config(tmp_path), mode="inprocess") as rollout:
        groups = await rollout.generate(prompts, 2, sampling, episode=episode)
        with pytest.raises(InvalidEpisodeError, match="max_turns must be an int >= 1"):
            bad = EpisodeSpec(environment=ENV, max_turns=0)
            await rollout.generate(prompts, 2, sampling, episode=bad)
        with pytest.raises(InvalidEpisodeError, match=r"package\.module:factory"):
            await rollout.generate(prompts, 2, sampling, episode=EpisodeSpec(environment="x"))
        # the rollout after the faults runs as usual: nothing is left behind
        again = await rollout.generate(prompts[-1:], 2, sampling, episode=episode)
    by_prompt = {g.prompt_id: g.samples for g in groups}
    assert sum(len(s) for s in by_prompt.values()) == 10  # no sample lost
    for fault, reason in faults.items():
        for s in by_prompt[fault]:
            assert s.episode is not None and s.episode.end_reason == reason
            assert s.episode.reward == 0.0 and s.episode.step_rewards == (0.25,)  # turn 1
    for s in by_prompt["huge"]:  # cut to 30 on the left; 4 + 3 + 30 + 3 + ... > 40: length
        assert s.episode is not None and s.episode.num_cut_tokens == 470
        assert s.episode.end_reason == "length"
    for s in [*by_prompt["long"], *again[0].samples]:  # 2 + (3 + 20) + 3 + 20 > 40 budget
        assert s.episode is not None and s.episode.end_reason == "length"
        assert len(s.token_ids) <= 40


async def test_episodes_without_an_environment_actor_are_refused(tmp_path: Path) -> None:
    config = rollout_config(num_generators=1, generator=TINY, run_dir=str(tmp_path))
    async with Rollout(config, mode="inprocess") as rollout:
        with pytest.raises(InvalidEpisodeError, match="'environment' actor"):
            await rollout.generate([[3, 4]], 2, GREEDY, episode=EpisodeSpec(environment=ENV))


def test_the_rl_loop_trains_an_episode_on_its_reward_and_mask() -> None:
    episode = EpisodeResult(
        loss_mask=(1, 0, 1), token_versions=(3, -1, 3), turn_ends=(1, 3),
        stop_reasons=("stop",) * 2, step_rewards=(0.5, 0.25), reward=0.75, end_reason="done",
    )  # fmt: skip
    sample = SampleResult(
        request_id="r", group_id="g", prompt_id="p", index=0, token_ids=(5, 9, 6),
        logprobs=(-1.0, 0.0, -2.0), finish_reason="stop", weight_versions=(3, 3), start_s=0.0,
        end_s=1.0, episode=episode,
    )  # fmt: skip
    spec = episode_sample((1, 2), sample)
    assert spec.reward == 0.75 and spec.loss_mask == (1, 0, 1)
    assert train_sample(spec).loss_mask == (1, 0, 1)
