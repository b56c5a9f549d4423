"""The task interface and the countdown task: verifier, SFT examples, lengths, determinism."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.tasks import (
    Countdown,
    CountdownConfig,
    TaskPrompt,
    count_walks,
    describe_lengths,
    get_task,
)
from pipeline.tasks.countdown import BOS, EOS, SEP, VOCAB_SIZE

TASK = Countdown()
PROMPT = TASK.make_prompt(9, [5, 6])  # valid answers include 7 4 2 0 and 8 7 4 1 0


def test_registry_returns_countdown_and_lists_names_on_error() -> None:
    task = get_task("countdown")
    assert isinstance(task, Countdown)
    assert (task.vocab_size, task.eos_token_id) == (VOCAB_SIZE, EOS)
    with pytest.raises(ValueError, match="countdown"):
        get_task("nope")


def test_prompt_layout() -> None:
    assert PROMPT.token_ids == (BOS, 5, 6, SEP, 9)
    assert PROMPT.meta == {"n": 9, "forbidden": [5, 6]}


@pytest.mark.parametrize("walk", [[7, 4, 2, 0], [8, 7, 4, 1, 0], [7, 4, 3, 2, 1, 0]])
def test_verifier_accepts_valid_walks(walk: list[int]) -> None:
    assert TASK.reward(PROMPT, [*walk, EOS]) == 1.0


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        ([7, 3, 0, EOS], "bad_step"),  # step of 4
        ([7, 7, 4, 2, 0, EOS], "bad_step"),  # step of 0
        ([8, 6, 3, 0, EOS], "forbidden"),
        ([7, 4, 2, EOS], "not_at_zero"),
        ([7, 4, 2, 0], "no_eos"),
        ([7, 4, 2, 0, EOS, EOS], "not_a_number"),
        ([7, 4, 1, 0, 0, EOS], "bad_step"),  # keeps going after 0
        ([7, 4, 2, 1, 257, EOS], "not_a_number"),
        ([], "no_eos"),
        ([EOS], "not_at_zero"),
        ([BOS, SEP, EOS], "not_a_number"),
    ],
)
def test_verifier_refuses_invalid(completion: list[int], reason: str) -> None:
    assert TASK.verdict(PROMPT, completion) == reason
    assert TASK.reward(PROMPT, completion) == 0.0


def test_overshoot_below_zero_is_refused() -> None:
    prompt = TASK.make_prompt(5, [])
    assert TASK.reward(prompt, [3, 1, 0, EOS]) == 1.0
    assert TASK.reward(prompt, [3, 1, -1, EOS]) == 0.0
    assert TASK.reward(prompt, [2, -1, EOS]) == 0.0


def test_make_prompt_refuses_impossible_prompts() -> None:
    for n, bad in [(9, [4, 5, 6]), (9, [9]), (9, [0]), (300, [])]:
        with pytest.raises(ValueError):
            TASK.make_prompt(n, bad)


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_sft_examples_are_valid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for prompt in TASK.sample_prompts(20, rng):
        forbidden = prompt.meta["forbidden"]
        assert prompt.meta["n"] not in forbidden and 0 not in forbidden
        assert not any(f + 1 in forbidden and f + 2 in forbidden for f in forbidden)
        assert TASK.reward(prompt, TASK.sft_example(prompt, rng)) == 1.0


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_warm_start_prompts_are_valid_and_reach_large_denser_forbidden_numbers(seed: int) -> None:
    sft = TASK.sft_prompts(200, np.random.default_rng(seed))
    rl = TASK.sample_prompts(200, np.random.default_rng(seed))
    for prompt in sft:  # the same rules as the RL prompts: valid and solvable
        forbidden = prompt.meta["forbidden"]
        assert not any(f + 1 in forbidden and f + 2 in forbidden for f in forbidden)
        assert len(forbidden) <= min(TASK.config.sft_max_forbidden, (prompt.meta["n"] - 1) // 3)
        assert TASK.reward(prompt, TASK.sft_example(prompt, np.random.default_rng(seed))) == 1.0
    # N uniform (mean about 130) against log-uniform (about 60); 4-30 forbidden against 2-6
    assert np.mean([p.meta["n"] for p in sft]) > 1.5 * np.mean([p.meta["n"] for p in rl])
    assert np.mean([len(p.meta["forbidden"]) for p in sft]) > 2 * np.mean(
        [len(p.meta["forbidden"]) for p in rl]
    )


def test_the_sft_prompt_distribution_is_configurable_and_checked() -> None:
    config = CountdownConfig(sft_uniform_n=False, sft_min_forbidden=2, sft_max_forbidden=6)
    plain = Countdown(config)
    assert plain.sft_prompts(20, np.random.default_rng(5)) == plain.sample_prompts(
        20, np.random.default_rng(5)
    )
    assert plain.fingerprint != TASK.fingerprint  # a different warm start, cached apart
    with pytest.raises(ValueError, match="sft_min_forbidden"):
        CountdownConfig(sft_min_forbidden=5, sft_max_forbidden=4)


def test_siblings_differ() -> None:
    rng = np.random.default_rng(1)
    for prompt in TASK.sample_prompts(50, rng):
        assert count_walks(prompt.meta["n"], prompt.meta["forbidden"]) >= 2
        if prompt.meta["n"] >= 12:
            walks = {tuple(TASK.sft_example(prompt, rng)) for _ in range(8)}
            assert len(walks) >= 2, TASK.render(prompt, [])


def test_count_walks_matches_hand_count() -> None:
    assert count_walks(3, []) == 4  # 2 1 0 | 2 0 | 1 0 | 0
    assert count_walks(4, [2, 3]) == 1  # 1 0


def test_lengths_are_long_tailed() -> None:
    stats = describe_lengths(TASK, 3000, np.random.default_rng(0))
    assert stats["ratio"] >= 4, stats
    assert stats["max"] <= TASK.config.max_n + 1


def test_prompts_are_deterministic_per_seed() -> None:
    def ids(seed: int) -> list[TaskPrompt]:
        return TASK.sample_prompts(30, np.random.default_rng(seed))

    assert ids(3) == ids(3)
    assert ids(3) != ids(4)
    assert all(p.prompt_id == TASK.make_prompt(**_args(p)).prompt_id for p in ids(3))


def _args(prompt: TaskPrompt) -> dict[str, object]:
    return {"n": prompt.meta["n"], "forbidden": prompt.meta["forbidden"]}


def test_render_is_readable() -> None:
    text = TASK.render(PROMPT, [7, 4, 2, 0, EOS])
    assert text == "9 avoiding [5, 6] -> 7 4 2 0 <eos> [ok]"


@pytest.mark.parametrize(
    ("completion", "index"),
    [
        ([7, 4, 2, 0, EOS], None),
        ([7, 3, 0, EOS], 1),  # step of 4
        ([8, 6, 3, 0, EOS], 1),  # forbidden 6
        ([7, 4, 2, EOS], 3),  # EOS short of 0
        ([7, 4, 2, 0, EOS, EOS], 5),  # anything after the final EOS
        ([7, 4, 2, 1, 257, EOS], 4),
        ([7, 4, 2, 0], None),  # cut off: no single token to blame
        ([7, 4, 2, 0, 1], 4),  # cut off, but past 0
        ([], None),
    ],
)
def test_first_error_points_at_the_wrong_token(completion: list[int], index: int | None) -> None:
    assert TASK.first_error(PROMPT, completion) == index


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 258), max_size=12))
def test_first_error_agrees_with_the_verdict(completion: list[int]) -> None:
    """A wrong token exactly when the verdict is not "ok" (bar a cut-off walk), and the
    tokens before it are a valid walk so far (what step credit leaves unblamed)."""
    index = TASK.first_error(PROMPT, completion)
    verdict = TASK.verdict(PROMPT, completion)
    if verdict == "ok":
        assert index is None
    elif verdict != "no_eos":  # a cut-off answer may have no wrong token, only a missing EOS
        assert index is not None
    if index:
        current = 9
        for token in completion[:index]:
            if token == EOS:  # only an EOS at 0 that something followed
                assert current == 0
                continue
            assert current - token in (1, 2, 3) and token not in (5, 6)
            current = token
