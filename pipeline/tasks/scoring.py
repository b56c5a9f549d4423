"""A task's verifier where samples finish: the scheduler's `scorer` for direct dispatch.

`task_reward(spec, model_dir=None)` is the factory the RL topology names in the scheduler's
options (`pipeline.tasks.scoring:task_reward`): it returns a `TaskScorer`, called as `(prompt
id, metadata, prompt ids, completion) -> reward` (the task's `reward` on a `TaskPrompt`
rebuilt from what travelled, `PromptMeta`), whose `error_index` locates a failed sample's
first wrong token for step credit (`first_error_index`, shared with the driver). `spec` is
what the run's `task` says (a registered name or "package.module:factory", `get_task`), so
the scheduler builds the same task from the same string; a task registered only in the
driver's process is unknown there. Tasks are built once per (spec, model folder) in a process
(a text task loads a tokenizer and encodes its prompts).

`safe_reward` is the one fence around a task's verifier, in the driver and the scheduler: a
reward that raises (or is not a finite number) scores 0, is logged (`reward_failed`) and is
counted (`TaskScorer.num_reward_errors`; the run's `num_reward_errors`).
`prompt_meta` refuses metadata the wire cannot carry, with a typed error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import structlog

from pipeline.tasks.base import Task, TaskPrompt, get_task
from transport.messages import PromptMeta

Reward = Callable[[str, Mapping[str, Any], Sequence[int], Sequence[int]], float]

log = structlog.get_logger()


def safe_reward(task: Task, prompt: TaskPrompt, completion: Sequence[int]) -> tuple[float, bool]:
    """`task.reward(prompt, completion)` as a float, and whether it failed: a verifier that
    raises or gives something other than a finite number scores 0 (logged, for the caller to
    count)."""
    try:
        value = float(task.reward(prompt, completion))
        if not math.isfinite(value):
            raise ValueError(f"reward is {value}")
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("reward_failed", task=task.name, prompt_id=prompt.prompt_id, error=error)
        return 0.0, True
    return value, False


def first_error_index(
    task: Task, prompt: TaskPrompt, completion: Sequence[int], reward: float
) -> int:
    """Step credit's input: the first wrong token of a failed sample as the task's verifier
    locates it (`Task.first_error`, optional), else -1 (a right answer, a task that cannot
    tell, a mistake no single token made, or a `first_error` that raises: logged)."""
    first_error = getattr(task, "first_error", None)
    if first_error is None or reward >= 1.0:
        return -1
    try:
        index = first_error(prompt, completion)
        return -1 if index is None else int(index)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("first_error_failed", task=task.name, prompt_id=prompt.prompt_id, error=error)
        return -1


class TaskScorer:
    """A task's verifier on what travelled with a streamed sample; counts the samples whose
    reward failed (`num_reward_errors`, scored 0)."""

    def __init__(self, spec: str, model_dir: str | None = None) -> None:
        self.task = cached_task(spec, model_dir)
        self.num_reward_errors = 0

    def __call__(
        self,
        prompt_id: str,
        meta: Mapping[str, Any],
        prompt_ids: Sequence[int],
        completion: Sequence[int],
    ) -> float:
        prompt = self._prompt(prompt_id, meta, prompt_ids)
        reward, failed = safe_reward(self.task, prompt, completion)
        self.num_reward_errors += failed
        return reward

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


@functools.lru_cache(maxsize=8)
def cached_task(spec: str, model_dir: str | None = None) -> Task:
    """`get_task(spec, model_dir=model_dir)`, built once per process (a scorer is made per
    streamed rollout; tasks are pure, so sharing one is safe)."""
    return get_task(spec, model_dir=model_dir)


def task_reward(spec: str, model_dir: str | None = None) -> TaskScorer:
    """The scheduler's scorer for the run's task `spec` (a registered name or
    "package.module:factory"); `model_dir`: the run's model folder, passed to a factory that
    takes it."""
    return TaskScorer(spec, model_dir or None)


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
