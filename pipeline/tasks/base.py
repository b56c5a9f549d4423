"""The task interface a user plugs into: prompts, a verifier, SFT examples, a renderer.

A ``Task`` is pure and synchronous: no sockets, no model. The RL loop asks it for prompts
(``sample_prompts``), turns each into a group of requests, and scores every finished
completion with ``reward`` (a float in [0, 1]). ``sft_example`` gives one valid completion
(EOS included) for the supervised warm start, whose prompts come from the task's
``sft_prompts`` when it has one (same signature as ``sample_prompts``; optional: a warm
start may emphasise what is rare in the RL prompts), else from ``sample_prompts``;
``render`` makes a prompt and a completion readable for logs and reports.

Contract:
- ``TaskPrompt.prompt_id`` is stable: the same prompt gets the same id in every iteration,
  so per-prompt length priors carry over.
- ``TaskPrompt.meta`` holds only msgpack/JSON-friendly values (what the verifier needs), so a
  prompt can travel over the wire with its samples.
- ``reward`` never raises on a completion: garbage scores 0.
- All randomness comes from the ``numpy.random.Generator`` passed in: the same seed gives the
  same prompts and examples.

``get_task(name)`` looks a task up in the registry; ``register_task`` adds one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskPrompt:
    prompt_id: str  # stable across iterations for the same prompt
    token_ids: tuple[int, ...]
    meta: Mapping[str, Any]  # whatever the verifier needs (msgpack/JSON-friendly)


@runtime_checkable
class Task(Protocol):
    name: str
    vocab_size: int
    eos_token_id: int

    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]: ...

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float: ...

    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]: ...

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str: ...


_REGISTRY: dict[str, Callable[[], Task]] = {}


def register_task(name: str, factory: Callable[[], Task]) -> None:
    """Make ``get_task(name)`` return ``factory()``; a name registers once."""
    if name in _REGISTRY:
        raise ValueError(f"task {name!r} is already registered")
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def get_task(name: str) -> Task:
    """A fresh task by name; ``ValueError`` listing the known names otherwise."""
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(task_names())}")
    return factory()
