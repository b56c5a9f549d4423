"""A task a random tiny model learns in a few GRPO steps: say 7 (for RL loop tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.tasks import TaskPrompt, register_task, task_names
from pipeline.tasks.scoring import task_reward as task_reward  # the scheduler's scorer

SEVEN, EOS, VOCAB = 7, 15, 16


class SaySeven:
    name = "say7"
    vocab_size = VOCAB
    eos_token_id = EOS

    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        return [
            TaskPrompt(
                prompt_id=f"p{i}", token_ids=tuple(int(t) for t in rng.integers(0, 10, 3)), meta={}
            )
            for i in range(n)
        ]

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        body = [t for t in completion if t != EOS]
        return sum(t == SEVEN for t in body) / max(len(body), 1)

    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]:
        return [SEVEN] * 4 + [EOS]

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        return " ".join(map(str, completion))


if "say7" not in task_names():
    register_task("say7", SaySeven)


class FlakySeven(SaySeven):
    """say7 with a user's bug: the reward raises on a completion holding token 3 (named by
    import path, "tests.pipeline.toytask:FlakySeven": such a sample scores 0 and is counted)."""

    name = "flaky7"

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        if 3 in completion:
            raise ValueError("token 3 breaks this verifier")
        return super().reward(prompt, completion)
