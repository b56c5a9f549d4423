"""Guess: the multi-turn toy task. Find a hidden number in a stated range; after every
guess the environment answers higher or lower, with the range that is left.

Token layout (``vocab_size`` 262): ids 0..255 are the numbers, ``BOS`` = 256, ``SEP`` =
257, ``EOS`` = 258 (ends every action), ``HIGHER`` = 259, ``LOWER`` = 260, ``INVALID`` = 261.

- prompt: ``BOS lo hi SEP``; the hidden number is in [lo, hi] and only the environment
  knows it (the prompt's ``meta["answer"]``, passed to the environment as ``env_info``).
- a turn: the model's action ``g EOS``, then the environment's observation ``HIGHER lo' hi'``
  (the number is above g: the range left is [g + 1, hi]) or ``LOWER lo' hi'``, or
  ``INVALID lo hi`` for an action that is not one number in the range followed by EOS (a
  wasted turn, never a crash). A right guess ends the episode (``done``).
- reward: 0 unless the number is found; found at turn t of ``max_turns``:
  ``1 - turn_cost * (t - 1) / max_turns`` (partial credit for fewer turns). Success = found.

Why it suits multi-turn RL: the model needs the environment's answers (the number is not in
the prompt), bisection finds any number of a range of at most 31 in 5 turns (the default
``max_turns``) while a guess anywhere in the range left needs about 2 ln(size) turns with a
long tail (it finds the number within 5 turns 66% of the time on the default ranges), so lengths are
long-tailed and a better policy is both shorter and more often right. The warm start
(``sft_episode``) imitates a mix of the two (``sft_bisect_prob``), trained on whole
trajectories with the loss mask; RL has to find that the midpoint pays.

``GuessGame`` is the pure game the environment (``GuessEnv``, built by ``make_guess_env``)
and the task's ``reward`` (a replay of a trajectory) share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from actors.environment import StepResult
from pipeline.tasks.base import TaskPrompt, register_task
from transport.messages import EpisodeResult, EpisodeSpec

NUM_NUMBERS = 256
BOS, SEP, EOS, HIGHER, LOWER, INVALID = 256, 257, 258, 259, 260, 261
VOCAB_SIZE = 262
ENVIRONMENT = "pipeline.tasks.guess:make_guess_env"
WORDS = {BOS: "<bos>", SEP: "|", EOS: ";", HIGHER: "higher", LOWER: "lower", INVALID: "invalid"}


@dataclass(frozen=True, slots=True)
class GuessConfig:
    """``min_size``..``max_size``: how many numbers a prompt's range holds (uniform);
    ``max_low``: the largest low end; ``max_turns``: guesses allowed; ``turn_cost``: the
    reward given up for using every turn (found at turn t: 1 - turn_cost (t - 1) /
    max_turns); ``sft_bisect_prob``: the warm start's share of midpoint guesses (the rest
    are uniform in the range left)."""

    min_size: int = 16
    max_size: int = 31
    max_low: int = 31
    max_turns: int = 5
    turn_cost: float = 0.5
    sft_bisect_prob: float = 0.3

    def __post_init__(self) -> None:
        if not 2 <= self.min_size <= self.max_size:
            raise ValueError(
                f"GuessConfig: need 2 <= min_size <= max_size, got {self.min_size}, {self.max_size}"
            )
        if self.max_low < 0 or self.max_low + self.max_size > NUM_NUMBERS:
            raise ValueError(
                f"GuessConfig: need 0 <= max_low and max_low + max_size <= {NUM_NUMBERS}, got "
                f"{self.max_low} + {self.max_size}"
            )
        if self.max_turns < 1:
            raise ValueError(f"GuessConfig.max_turns must be >= 1, got {self.max_turns}")
        if not 0 <= self.turn_cost < 1:
            raise ValueError(f"GuessConfig.turn_cost must be in [0, 1), got {self.turn_cost}")
        if not 0 <= self.sft_bisect_prob <= 1:
            raise ValueError(
                f"GuessConfig.sft_bisect_prob must be in [0, 1], got {self.sft_bisect_prob}"
            )


class GuessGame:
    """One game: the range left, the hidden number and the turns taken. ``step`` takes an
    action's tokens and gives (observation, reward, done)."""

    def __init__(self, lo: int, hi: int, answer: int, *, max_turns: int, turn_cost: float):
        if not 0 <= lo <= answer <= hi < NUM_NUMBERS:
            raise ValueError(
                f"GuessGame: need 0 <= lo <= answer <= hi < 256, got {lo} {answer} {hi}"
            )
        self.lo, self.hi, self.answer = lo, hi, answer
        self.max_turns, self.turn_cost = max_turns, turn_cost
        self.turns = 0

    @classmethod
    def from_info(cls, info: Mapping[str, Any], config: GuessConfig) -> GuessGame:
        """The game of a prompt's ``meta`` / ``env_info`` (``lo``, ``hi``, ``answer``)."""
        try:
            lo, hi, answer = (int(info[k]) for k in ("lo", "hi", "answer"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"guess env_info needs int lo, hi and answer, got {info!r}") from exc
        return cls(lo, hi, answer, max_turns=config.max_turns, turn_cost=config.turn_cost)

    def guess_of(self, action: Sequence[int]) -> int | None:
        """The guessed number, or None for an action that is not ``g EOS`` with g in range."""
        if len(action) != 2 or action[1] != EOS or not self.lo <= action[0] <= self.hi:
            return None
        return int(action[0])

    def step(self, action: Sequence[int]) -> tuple[list[int], float, bool]:
        self.turns += 1
        guess = self.guess_of([int(t) for t in action])
        if guess is None:
            return [INVALID, self.lo, self.hi], 0.0, False
        if guess == self.answer:
            return [], 1.0 - self.turn_cost * (self.turns - 1) / self.max_turns, True
        if guess < self.answer:
            self.lo = guess + 1
            return [HIGHER, self.lo, self.hi], 0.0, False
        self.hi = guess - 1
        return [LOWER, self.lo, self.hi], 0.0, False


class GuessEnv:
    """The environment the environment actor runs per episode (synchronous: each step is a
    few integer comparisons)."""

    def __init__(self, config: GuessConfig | None = None) -> None:
        self.config = config or GuessConfig()
        self.game: GuessGame | None = None

    def reset(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> list[int]:
        self.game = GuessGame.from_info(info, self.config)
        return []  # the prompt states the range

    def step(self, action_ids: tuple[int, ...]) -> StepResult:
        if self.game is None:
            raise RuntimeError("GuessEnv.step before reset")
        observation, reward, done = self.game.step(action_ids)
        return StepResult(observation=observation, reward=reward, done=done)


def make_guess_env() -> GuessEnv:
    return GuessEnv()


class Guess:
    """The guess ``Task`` (see the module docstring for layout and reward)."""

    name = "guess"
    vocab_size = VOCAB_SIZE
    eos_token_id = EOS

    def __init__(self, config: GuessConfig | None = None) -> None:
        self.config = config or GuessConfig()
        cfg = self.config
        #: the multi-turn episode every prompt runs (the RL loop adds environment actors)
        self.episode = EpisodeSpec(
            environment=ENVIRONMENT,
            max_turns=cfg.max_turns,
            max_turn_tokens=2,
            max_observation_tokens=3,
        )

    @property
    def fingerprint(self) -> str:
        """Everything that changes the warm start's data: part of its cache key."""
        data = {k: v for k, v in asdict(self.config).items() if k != "turn_cost"}
        return f"{self.name}:{sorted(data.items())}"

    def min_new_tokens(self) -> int:
        """The episode budget that fits every turn: actions and all but the last answer."""
        return self.config.max_turns * 5 - 3

    # ---- prompts -------------------------------------------------------------------------
    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        cfg = self.config
        out = []
        for _ in range(n):
            size = int(rng.integers(cfg.min_size, cfg.max_size + 1))
            lo = int(rng.integers(0, cfg.max_low + 1))
            out.append(self.make_prompt(lo, lo + size - 1, int(rng.integers(lo, lo + size))))
        return out

    def make_prompt(self, lo: int, hi: int, answer: int) -> TaskPrompt:
        if not 0 <= lo <= answer <= hi < NUM_NUMBERS:
            raise ValueError(f"invalid guess prompt: lo={lo}, hi={hi}, answer={answer}")
        return TaskPrompt(
            prompt_id=f"guess-{lo}-{hi}-{answer}",
            token_ids=(BOS, lo, hi, SEP),
            meta={"lo": lo, "hi": hi, "answer": answer},
        )

    # ---- verifier ------------------------------------------------------------------------
    def replay(self, prompt: TaskPrompt, completion: Sequence[int]) -> tuple[float, int, str]:
        """(reward, turns, outcome) of a trajectory, replayed against the game: outcome is
        ``found``, ``max_turns``, ``wrong_observation`` (not what the game answers) or
        ``unfinished`` (it stops mid-turn)."""
        game = GuessGame.from_info(prompt.meta, self.config)
        tokens = [int(t) for t in completion]
        pos = 0
        while pos < len(tokens) and game.turns < self.config.max_turns:
            end = tokens.index(EOS, pos) + 1 if EOS in tokens[pos : pos + 2] else pos + 2
            if end > len(tokens):
                return 0.0, game.turns, "unfinished"
            observation, reward, done = game.step(tokens[pos:end])
            if done:
                return reward, game.turns, "found"
            if game.turns >= self.config.max_turns:  # the last answer is not appended
                return 0.0, game.turns, "max_turns"
            pos = end + len(observation)
            if tokens[end:pos] != observation:
                return 0.0, game.turns, "wrong_observation"
        return 0.0, game.turns, "unfinished"

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        """The episode's reward, recomputed from its trajectory (the environment's, when the
        observations are the game's)."""
        return self.replay(prompt, completion)[0]

    def success(self, episode: EpisodeResult) -> bool:
        """An episode succeeds when it found the number (only a right guess ends it)."""
        return episode.end_reason == "done"

    # ---- supervision and display -----------------------------------------------------------
    def sft_episode(
        self, prompt: TaskPrompt, rng: np.random.Generator
    ) -> tuple[list[int], list[int]]:
        """A whole trajectory of the warm start's policy and its loss mask (1: an action
        token, 0: an observation token): each guess is the midpoint of the range left with
        probability ``sft_bisect_prob``, else uniform in it."""
        game = GuessGame.from_info(prompt.meta, self.config)
        tokens: list[int] = []
        mask: list[int] = []
        while game.turns < self.config.max_turns:
            if rng.random() < self.config.sft_bisect_prob:
                guess = (game.lo + game.hi) // 2
            else:
                guess = int(rng.integers(game.lo, game.hi + 1))
            observation, _, done = game.step([guess, EOS])
            tokens += [guess, EOS]
            mask += [1, 1]
            if done or game.turns >= self.config.max_turns:
                break
            tokens += observation
            mask += [0] * len(observation)
        return tokens, mask

    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]:
        return self.sft_episode(prompt, rng)[0]

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        shown = " ".join(WORDS.get(int(t), str(int(t))) for t in completion)
        _, turns, outcome = self.replay(prompt, completion)
        meta = prompt.meta
        where = f"[{meta['lo']}, {meta['hi']}] hiding {meta['answer']}"
        return f"{where}: {shown} [{outcome}, {turns} turns]"


register_task("guess", Guess)
