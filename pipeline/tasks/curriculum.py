"""Curriculum: draw each iteration's prompts where GRPO can learn.

A group whose samples all get the same reward has zero advantage and teaches nothing; on
countdown that is most short walks (nearly always right) and most long ones (nearly always
wrong) once the warm start is done. A task that grades its prompts (an optional
``difficulty(prompt) -> int`` bucket: countdown's is log2 N) gets a curriculum: the loop
draws a pool of ``pool_factor`` times the prompts it needs, and keeps ``n`` of them
without replacement with weight p(1 - p) + ``floor``, where p is the bucket's running
success rate (an exponential average of the training rewards, starting at ``prior``).
As short walks are mastered the weight moves to longer ones ("as success rises"); the
floor keeps every bucket in play. Pure and deterministic given the rng and the rewards;
``state()`` / ``load()`` carry it across a resume.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.tasks.base import TaskPrompt

Difficulty = Callable[[TaskPrompt], int]


class Curriculum:
    def __init__(
        self,
        difficulty: Difficulty,
        *,
        pool_factor: int = 4,
        floor: float = 0.05,
        decay: float = 0.7,
        prior: float = 0.5,
    ) -> None:
        if pool_factor < 1 or not floor > 0 or not 0 <= decay < 1 or not 0 <= prior <= 1:
            raise ValueError("need pool_factor >= 1, floor > 0, 0 <= decay < 1, prior in [0, 1]")
        self.difficulty = difficulty
        self.pool_factor = pool_factor
        self.floor = floor
        self.decay = decay
        self.prior = prior
        self.success: dict[int, float] = {}  # bucket -> running success rate

    def weight(self, bucket: int) -> float:
        p = self.success.get(bucket, self.prior)
        return p * (1 - p) + self.floor

    def select(
        self, pool: Sequence[TaskPrompt], n: int, rng: np.random.Generator
    ) -> list[TaskPrompt]:
        """`n` prompts of `pool`, in pool order, drawn by weight without replacement."""
        if n > len(pool):
            raise ValueError(f"cannot select {n} prompts from a pool of {len(pool)}")
        w = np.array([self.weight(self.difficulty(p)) for p in pool])
        keep = rng.choice(len(pool), size=n, replace=False, p=w / w.sum())
        return [pool[i] for i in sorted(keep)]

    def update(self, prompts: Sequence[TaskPrompt], rewards: Sequence[float]) -> None:
        """One iteration's mean reward per prompt (in the order of `prompts`)."""
        by_bucket: dict[int, list[float]] = {}
        for prompt, reward in zip(prompts, rewards, strict=True):
            by_bucket.setdefault(self.difficulty(prompt), []).append(reward)
        for bucket, values in by_bucket.items():
            old = self.success.get(bucket, self.prior)
            self.success[bucket] = self.decay * old + (1 - self.decay) * float(np.mean(values))

    def state(self) -> dict[str, Any]:
        return {"success": {str(k): v for k, v in sorted(self.success.items())}}

    def load(self, state: Mapping[str, Any]) -> None:
        self.success = {int(k): float(v) for k, v in state["success"].items()}
