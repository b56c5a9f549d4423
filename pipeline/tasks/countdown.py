"""Countdown: the embedded default task. Walk from N down to 0 in steps of 1-3, never
landing on a forbidden number.

Token layout (``vocab_size`` 259): ids 0..255 are the numbers themselves, ``BOS`` = 256,
``SEP`` = 257, ``EOS`` = 258.

- prompt: ``BOS f_1 .. f_k SEP N`` with the forbidden numbers ``f`` ascending; N comes last so
  that every answer token is "the previous token minus 1, 2 or 3".
- answer: the numbers the walk lands on after N, ending with ``0 EOS``; for N = 9 and
  forbidden {5, 6}: ``7 4 2 0 EOS`` or ``8 7 4 1 0 EOS`` or ...

Why it suits the pipeline (issue 5): it is verifiable exactly; answer length ~ N / 2.2, and N
is log-uniform in [``min_n``, ``max_n``], so lengths are long-tailed (p99/p50 ~ 7) and
correlated within a group (siblings share N); every step has up to three valid choices, so
siblings differ. Forbidden numbers never leave the walk stuck: N and 0 are never forbidden
and no three consecutive numbers are, so from any allowed number one of the next three is
allowed (or 0 is within reach).

Reward: 1.0 for a valid walk that ends exactly at 0 followed by EOS, else 0.0. No partial
credit: a group-normalised advantage only needs some groups with mixed outcomes, and the
warm start makes success common enough (partial credit for "long valid prefixes" would also
reward stalling). ``verdict`` says why a completion fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pipeline.tasks.base import Task, TaskPrompt, register_task

NUM_NUMBERS = 256
BOS, SEP, EOS = 256, 257, 258
VOCAB_SIZE = 259
STEPS = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class CountdownConfig:
    """``min_n``..``max_n``: range of the log-uniform start number; ``min_forbidden``..
    ``max_forbidden``: how many forbidden numbers a prompt has (fewer when N is too small);
    ``step_probs``: the SFT walk's preference for steps of 1, 2, 3 (renormalised over the
    steps allowed at each point)."""

    min_n: int = 4
    max_n: int = 255
    min_forbidden: int = 2
    max_forbidden: int = 6
    step_probs: tuple[float, float, float] = (0.2, 0.4, 0.4)
    partial_credit: float = 0.0  # reward share for the valid part of a failed walk
    # the warm start's prompts (`sft_prompts`): N uniform, not log-uniform, and denser
    # forbidden numbers, so that large numbers and the forbidden check are seen often
    sft_uniform_n: bool = True
    sft_min_forbidden: int = 4
    sft_max_forbidden: int = 30

    def __post_init__(self) -> None:
        if not 4 <= self.min_n <= self.max_n < NUM_NUMBERS:
            raise ValueError(
                f"need 4 <= min_n <= max_n <= {NUM_NUMBERS - 1}, got {self.min_n}, {self.max_n}"
            )
        for lo, hi, what in (
            (self.min_forbidden, self.max_forbidden, ""),
            (self.sft_min_forbidden, self.sft_max_forbidden, "sft_"),
        ):
            if not 0 <= lo <= hi:
                raise ValueError(
                    f"need 0 <= {what}min_forbidden <= {what}max_forbidden, got {lo}, {hi}"
                )
        if len(self.step_probs) != 3 or min(self.step_probs) <= 0:
            raise ValueError(f"step_probs must be three positive weights, got {self.step_probs}")


class Countdown:
    """The countdown ``Task`` (see the module docstring for layout and reward)."""

    name = "countdown"
    vocab_size = VOCAB_SIZE
    eos_token_id = EOS

    def __init__(self, config: CountdownConfig | None = None) -> None:
        self.config = config or CountdownConfig()

    @property
    def fingerprint(self) -> str:
        """Everything that changes the data: part of the warm start's cache key."""
        data = {k: v for k, v in asdict(self.config).items() if k != "partial_credit"}
        return f"{self.name}:{sorted(data.items())}"  # reward shaping does not change SFT

    # ---- prompts -------------------------------------------------------------------------
    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        cfg = self.config
        return [
            self.make_prompt(*self._draw(rng, False, cfg.min_forbidden, cfg.max_forbidden))
            for _ in range(n)
        ]

    def sft_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        """The warm start's prompts. What the held-out prompts fail on is mostly landing on a
        forbidden number that is large (measured on the 400-step warm start: 33% of samples
        `forbidden`, 21% `bad_step`): log-uniform N rarely walks past large numbers and 2-6
        forbidden ones give few decisions that need the check. N uniform and 4-30 forbidden
        numbers (at most (N - 1) / 3) teach both per token trained (same 400 steps: held-out
        success 0.45 -> 0.67 at temperature 1, for 2.1x the tokens; 1,000 steps of the
        RL distribution reached 0.60)."""
        cfg = self.config
        return [
            self.make_prompt(
                *self._draw(rng, cfg.sft_uniform_n, cfg.sft_min_forbidden, cfg.sft_max_forbidden)
            )
            for _ in range(n)
        ]

    def make_prompt(self, n: int, forbidden: Sequence[int]) -> TaskPrompt:
        bad = sorted(int(f) for f in forbidden)
        if not 0 < n < NUM_NUMBERS or any(not 0 < f < n for f in bad) or _has_run(set(bad)):
            raise ValueError(f"invalid countdown prompt: n={n}, forbidden={bad}")
        return TaskPrompt(
            prompt_id=f"countdown-{n}-{'.'.join(map(str, bad))}",
            token_ids=(BOS, *bad, SEP, n),
            meta={"n": n, "forbidden": bad},
        )

    def _draw(
        self, rng: np.random.Generator, uniform_n: bool, lo: int, hi: int
    ) -> tuple[int, list[int]]:
        cfg = self.config
        if uniform_n:
            n = int(rng.integers(cfg.min_n, cfg.max_n + 1))
        else:
            log_n = rng.uniform(np.log(cfg.min_n), np.log(cfg.max_n + 1))
            n = min(int(np.exp(log_n)), cfg.max_n)
        want = min(int(rng.integers(lo, hi + 1)), (n - 1) // 3)
        chosen: set[int] = set()
        for candidate in rng.permutation(np.arange(1, n)):
            if len(chosen) >= want:
                break
            if not _has_run(chosen | {int(candidate)}):
                chosen.add(int(candidate))
        return n, sorted(chosen)

    def difficulty(self, prompt: TaskPrompt) -> int:
        """The curriculum's bucket: log2 N (answers are about N / 2.2 tokens long)."""
        return int(prompt.meta["n"]).bit_length() - 1

    # ---- verifier ------------------------------------------------------------------------
    def verdict(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        """``"ok"`` for a valid answer, else a short reason."""
        tokens = [int(t) for t in completion]
        if not tokens or tokens[-1] != EOS:
            return "no_eos"
        current, forbidden = int(prompt.meta["n"]), set(prompt.meta["forbidden"])
        for token in tokens[:-1]:
            if not 0 <= token < NUM_NUMBERS:
                return "not_a_number"
            if current - token not in STEPS:
                return "bad_step"
            if token in forbidden:
                return "forbidden"
            current = token
        return "ok" if current == 0 else "not_at_zero"

    def first_error(self, prompt: TaskPrompt, completion: Sequence[int]) -> int | None:
        """Index of the first completion token that makes the answer wrong (None when it is
        right): a bad step, a forbidden number, a non-number, an EOS short of 0 or anything after
        the final EOS. None as well for an answer cut off without EOS: it walked too slowly,
        and no single token is to blame."""
        current, forbidden = int(prompt.meta["n"]), set(prompt.meta["forbidden"])
        for i, token in enumerate(int(t) for t in completion):
            if token == EOS:  # the answer ends: right only at 0, and only as its last token
                if current != 0:
                    return i
                return i + 1 if i + 1 < len(completion) else None
            if not 0 <= token < NUM_NUMBERS or current - token not in STEPS or token in forbidden:
                return i
            current = token
        return None

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        """1.0 for a valid walk; otherwise `partial_credit` times the fraction of the way
        down that was walked validly before the first mistake (0 by default)."""
        if self.verdict(prompt, completion) == "ok":
            return 1.0
        if not self.config.partial_credit:
            return 0.0
        n, forbidden = int(prompt.meta["n"]), set(prompt.meta["forbidden"])
        current = n
        for token in (int(t) for t in completion):
            if current - token not in STEPS or token in forbidden:
                break
            current = token
        return self.config.partial_credit * (n - current) / n

    # ---- supervision and display -----------------------------------------------------------
    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]:
        current, forbidden = int(prompt.meta["n"]), set(prompt.meta["forbidden"])
        probs = self.config.step_probs
        walk: list[int] = []
        while current > 0:
            options = [
                (current - s, p)
                for s, p in zip(STEPS, probs, strict=True)
                if current - s >= 0 and current - s not in forbidden
            ]
            weights = np.array([p for _, p in options])
            current = options[int(rng.choice(len(options), p=weights / weights.sum()))][0]
            walk.append(current)
        return [*walk, EOS]

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        words = {BOS: "<bos>", SEP: "|", EOS: "<eos>"}
        shown = " ".join(words.get(int(t), str(int(t))) for t in completion)
        meta = prompt.meta
        return (
            f"{meta['n']} avoiding {list(meta['forbidden'])} -> {shown} "
            f"[{self.verdict(prompt, completion)}]"
        )


def _has_run(numbers: set[int]) -> bool:
    """True when three consecutive numbers are all in ``numbers``."""
    return any(x + 1 in numbers and x + 2 in numbers for x in numbers)


def count_walks(n: int, forbidden: Sequence[int]) -> int:
    """How many valid answers a prompt has (dynamic programming over the numbers)."""
    bad = set(forbidden)
    ways = [1] + [0] * n  # ways[x]: valid walks from x down to 0
    for x in range(1, n + 1):
        ways[x] = sum(ways[x - s] for s in STEPS if x - s >= 0 and x - s not in bad)
    return ways[n]


def describe_lengths(task: Task, n: int, rng: np.random.Generator) -> dict[str, float]:
    """p50/p90/p99/max/mean of SFT answer lengths (EOS included) over ``n`` prompts, and
    ``ratio`` = p99 / p50 (the issue asks for >= 4)."""
    lengths = np.array([len(task.sft_example(p, rng)) for p in task.sample_prompts(n, rng)])
    p50, p90, p99 = (float(np.percentile(lengths, q)) for q in (50, 90, 99))
    return {
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "max": float(lengths.max()),
        "mean": float(lengths.mean()),
        "ratio": p99 / p50,
    }


register_task("countdown", Countdown)
register_task("countdown-partial", lambda: Countdown(CountdownConfig(partial_credit=0.5)))
