"""A task's verifier where samples finish: the scheduler's `scorer` for direct dispatch.

`task_reward(name)` is the factory the RL topology names in the scheduler's options
(`pipeline.tasks.scoring:task_reward`): it returns `(prompt id, metadata, prompt ids,
completion) -> reward`, the registered task's `reward` on a `TaskPrompt` rebuilt from what
travelled (`PromptMeta`). A task registered only in the driver's process is unknown there;
`prompt_meta` refuses metadata the wire cannot carry, with a typed error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.tasks.base import TaskPrompt, get_task
from transport.messages import PromptMeta

Reward = Callable[[str, Mapping[str, Any], Sequence[int], Sequence[int]], float]


def task_reward(name: str) -> Reward:
    task = get_task(name)

    def reward(
        prompt_id: str,
        meta: Mapping[str, Any],
        prompt_ids: Sequence[int],
        completion: Sequence[int],
    ) -> float:
        prompt = TaskPrompt(prompt_id=prompt_id, token_ids=tuple(prompt_ids), meta=meta)
        return float(task.reward(prompt, completion))

    return reward


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
