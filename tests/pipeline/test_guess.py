"""The guess task: its game and environment, its reward, the warm start's masked
trajectories and the RL loop's episode metrics (pure parts; the real run is in
test_multiturn_run.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.rl.loop import episode_metrics, held_out_row, prompt_specs, success_rate
from pipeline.rollout.api import Group
from pipeline.tasks import TaskError, check_episode_budget, episode_spec, get_task
from pipeline.tasks.guess import (
    EOS,
    HIGHER,
    INVALID,
    LOWER,
    Guess,
    GuessConfig,
    GuessGame,
    make_guess_env,
)
from pipeline.tasks.warmstart import IGNORE, sft_batch
from transport.messages import EpisodeResult, SampleResult


def test_the_game_answers_higher_lower_invalid_and_pays_less_for_more_turns() -> None:
    game = GuessGame(10, 25, 17, max_turns=5, turn_cost=0.5)
    assert game.step([12, EOS]) == ([HIGHER, 13, 25], 0.0, False)
    assert game.step([30, EOS]) == ([INVALID, 13, 25], 0.0, False)  # out of the range left
    assert game.step([EOS]) == ([INVALID, 13, 25], 0.0, False)  # not a number
    assert game.step([20, EOS]) == ([LOWER, 13, 19], 0.0, False)
    assert game.step([17, EOS]) == ([], pytest.approx(1 - 0.5 * 4 / 5), True)
    first = GuessGame(10, 25, 17, max_turns=5, turn_cost=0.5)
    assert first.step([17, EOS]) == ([], 1.0, True)  # found at once: full reward


def test_the_environment_plays_the_prompts_game() -> None:
    task = Guess()
    prompt = task.make_prompt(3, 20, 9)
    env = make_guess_env()
    assert env.reset(prompt.token_ids, dict(prompt.meta)) == []
    step = env.step((11, EOS))
    assert (list(step.observation), step.reward, step.done) == ([LOWER, 3, 10], 0.0, False)
    with pytest.raises(ValueError, match="lo, hi and answer"):
        env.reset(prompt.token_ids, {"lo": 3})


def test_reward_replays_the_trajectory_and_matches_the_environment() -> None:
    task, rng = Guess(), np.random.default_rng(0)
    outcomes = set()
    for prompt in task.sample_prompts(200, rng):
        tokens, mask = task.sft_episode(prompt, rng)
        env = make_guess_env()
        env.reset(prompt.token_ids, dict(prompt.meta))
        pos, env_reward, turns, want_mask = 0, 0.0, 0, []
        while pos < len(tokens):  # drive the environment with the trajectory's actions
            step = env.step(tuple(tokens[pos : pos + 2]))
            env_reward += step.reward
            turns += 1
            shown = list(step.observation)[: len(tokens) - pos - 2]  # the last is not shown
            assert tokens[pos + 2 : pos + 2 + len(shown)] == shown
            want_mask += [1, 1] + [0] * len(shown)  # an action "g ;", then the answer
            pos += 2 + len(shown)
        reward, replay_turns, outcome = task.replay(prompt, tokens)
        assert reward == pytest.approx(env_reward) and replay_turns == turns
        assert task.reward(prompt, tokens) == reward
        assert mask == want_mask
        outcomes.add(outcome)
    assert outcomes == {"found", "max_turns"}  # the warm start's policy fails sometimes
    prompt = task.make_prompt(0, 15, 5)
    assert task.replay(prompt, [7, EOS, HIGHER, 8, 15]) == (0.0, 1, "wrong_observation")
    assert task.replay(prompt, [7, EOS, LOWER, 0, 6, 3]) == (0.0, 1, "unfinished")


def test_the_warm_start_batch_masks_observation_tokens_out_of_the_loss() -> None:
    task = Guess()
    prompt = task.make_prompt(0, 15, 5)
    tokens = [7, EOS, LOWER, 0, 6, 5, EOS]
    mask = [1, 1, 0, 0, 0, 1, 1]
    inputs, targets = sft_batch(task, [(prompt.token_ids, tokens)], 64, [mask])
    assert inputs[0].tolist() == [*prompt.token_ids, *tokens][:-1]
    p = len(prompt.token_ids)
    assert targets[0, : p - 1].tolist() == [IGNORE] * (p - 1)  # the prompt
    assert targets[0, p - 1 :].tolist() == [7, EOS, IGNORE, IGNORE, IGNORE, 5, EOS]
    with pytest.raises(ValueError, match="example 0 has 7 completion tokens but 6"):
        sft_batch(task, [(prompt.token_ids, tokens)], 64, [mask[:-1]])


def test_a_multi_turn_task_declares_its_episode_and_budget() -> None:
    task = get_task("guess")
    spec = episode_spec(task)
    assert spec is not None and spec.environment == "pipeline.tasks.guess:make_guess_env"
    assert spec.max_turns == 5 and spec.max_turn_tokens == 2
    assert episode_spec(get_task("countdown")) is None
    check_episode_budget(task, 22)
    with pytest.raises(TaskError, match="max_new_tokens 21 is less than the 22 tokens"):
        check_episode_budget(task, 21)
    task.episode = "pkg.mod:env"  # type: ignore[assignment]
    with pytest.raises(TaskError, match=r"must be a transport\.messages\.EpisodeSpec"):
        episode_spec(task)
    with pytest.raises(ValueError, match="min_size <= max_size"):
        GuessConfig(min_size=9, max_size=8)


def episode_sample(i: int, end: str, turns: int, reward: float) -> SampleResult:
    ep = EpisodeResult(
        loss_mask=(1,) * turns, token_versions=(0,) * turns, turn_ends=tuple(range(1, turns + 1)),
        stop_reasons=("stop",) * turns, step_rewards=(0.0,) * turns, reward=reward,
        end_reason=end,  # type: ignore[arg-type]
    )  # fmt: skip
    return SampleResult(
        request_id=f"r{i}", group_id="g", prompt_id="p", index=i, token_ids=(1,) * turns,
        logprobs=(0.0,) * turns, finish_reason="stop", weight_versions=(0,), start_s=0.0,
        end_s=1.0, episode=ep,
    )  # fmt: skip


def test_the_loops_episode_metrics_count_successes_turns_and_end_reasons() -> None:
    task = Guess()
    samples = (
        episode_sample(0, "done", 2, 0.8),
        episode_sample(1, "done", 5, 0.6),
        episode_sample(2, "max_turns", 5, 0.0),
        episode_sample(3, "env_error", 1, 0.0),
    )
    groups = [Group(prompt_id="p", samples=samples)]
    rewards = [s.episode.reward for s in samples if s.episode is not None]
    assert success_rate(task, rewards, groups) == 0.5  # found, though no reward is 1
    assert episode_metrics(groups) == {
        "mean_turns": 3.25,
        "max_turns_taken": 5,
        "episode_ends": {"done": 2, "env_error": 1, "max_turns": 1},
    }
    assert held_out_row((0.35, 0.5, 3.25), "_before") == {
        "eval_reward_before": 0.35, "eval_success_before": 0.5, "eval_mean_turns_before": 3.25,
    }  # fmt: skip
    prompt = task.make_prompt(4, 30, 11)
    [spec] = prompt_specs(task, ["p0"], [prompt])
    assert spec.env_info == {"lo": 4, "hi": 30, "answer": 11}
    countdown = get_task("countdown")
    [plain] = prompt_specs(countdown, ["c"], countdown.sample_prompts(1, np.random.default_rng(0)))
    assert plain.env_info == {}  # a single-turn prompt carries nothing to an environment
