"""A task's verifier where samples finish: the scheduler's `scorer` for direct dispatch.

`task_reward(name)` is the factory the RL topology names in the scheduler's options
(`pipeline.tasks.scoring:task_reward`): it returns a `TaskScorer`, called as `(prompt id,
metadata, prompt ids, completion) -> reward` (the registered task's `reward` on a
`TaskPrompt` rebuilt from what travelled, `PromptMeta`), whose `error_index` locates a failed
sample's first wrong token for step credit (`first_error_index`, shared with the driver).
A task registered only in the driver's process is unknown there;
`prompt_meta` refuses metadata the wire cannot carry, with a typed error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.tasks.base import Task, TaskPrompt, get_task
from transport.messages import PromptMeta

Reward = Callable[[str, Mapping[str, Any], Sequence[int], Sequence[int]], float]


def first_error_index(
    task: Task, prompt: TaskPrompt, completion: Sequence[int], reward: float
) -> int:
    """Step credit's input: the first wrong token of a failed sample as the task's verifier
    locates it (`Task.first_error`, optional), else -1 (a right answer, a task that cannot
    tell, or a mistake no single token made)."""
    first_error = getattr(task, "first_error", None)
    if first_error is None or reward >= 1.0:
        return -1
    index = first_error(prompt, completion)
    return -1 if index is None else int(index)


class TaskScorer:
    """A registered task's verifier on what travelled with a streamed sample."""

    def __init__(self, name: str) -> None:
        self.task = get_task(name)

    def __call__(
        self,
        prompt_id: str,
        meta: Mapping[str, Any],
        prompt_ids: Sequence[int],
        completion: Sequence[int],
    ) -> float:
        return float(self.task.reward(self._prompt(prompt_id, meta, prompt_ids), completion))

    def error_index(
        self,
        prompt_id: str,
        meta: Mapping[str, Any],
        prompt_ids: Sequence[int],
        completion: Sequence[int],
        reward: float,
    ) -> int:
        prompt = self._prompt(prompt_id, meta, prompt_ids)
        return first_error_index(self.task, prompt, completion, reward)

    @staticmethod
    def _prompt(prompt_id: str, meta: Mapping[str, Any], prompt_ids: Sequence[int]) -> TaskPrompt:
        return TaskPrompt(prompt_id=prompt_id, token_ids=tuple(prompt_ids), meta=meta)


def task_reward(name: str) -> Reward:
    return TaskScorer(name)


def prompt_meta(prompt_id: str, prompt: TaskPrompt) -> PromptMeta:
    """`prompt`'s metadata as it travels (lists become tuples); `TypeError` for a value the
    wire does not carry (scalars, or flat lists of ints, floats or strings)."""
    meta: dict[str, Any] = {}
    for key, raw in prompt.meta.items():
        value = _plain(raw)
        if isinstance(value, list | tuple):
            value = tuple(_plain(v) for v in value)
            kinds = {type(v) for v in value}
            if len(kinds) > 1 or not kinds <= {int, float, str}:
                raise TypeError(f"prompt {prompt_id}: meta {key!r} is not a flat list of one type")
        elif not isinstance(value, int | float | str | bool):
            kind = type(value).__name__
            raise TypeError(f"prompt {prompt_id}: meta {key!r} ({kind}) cannot travel")
        meta[key] = value
    return PromptMeta(prompt_id=prompt_id, meta=meta)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python scalar it holds (anything else unchanged)."""
    return value.item() if isinstance(value, np.generic) else value
