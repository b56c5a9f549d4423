"""The environment API a multi-turn task implements, and its loading by import path.

An environment is built per episode by a factory named "package.module:factory" (called
with no arguments, in the environment actor's process) and lives for the episode:

    class GuessEnv:
        async def reset(self, prompt_ids, info) -> Observation: ...   # before turn 1
        async def step(self, action_ids) -> StepResult: ...           # after each turn
        async def close(self) -> None: ...                            # optional

An `Observation` is token ids (a sequence of ints) or text; text is turned into ids by the
environment's own `encode(text) -> Sequence[int]` (an environment that returns text and has
no `encode` fails its episode as "bad_observation"). Token ids are appended as they are:
the model's own action tokens are never re-tokenised. `reset` and `step` may also be plain
functions (they then run on the actor's event loop, so they must be quick)."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from transport.messages import MetaValue

Observation: TypeAlias = Sequence[int] | str


@dataclass(frozen=True, slots=True)
class StepResult:
    """What a step returns: the observation to append, the step's reward, and whether the
    episode is over (then the observation is not appended)."""

    observation: Observation = ()
    reward: float = 0.0
    done: bool = False


class Environment(Protocol):
    """One episode's environment (see the module)."""

    def reset(
        self, prompt_ids: tuple[int, ...], info: Mapping[str, MetaValue]
    ) -> Awaitable[Observation] | Observation: ...

    def step(self, action_ids: tuple[int, ...]) -> Awaitable[StepResult] | StepResult: ...


EnvironmentFactory: TypeAlias = Callable[[], Environment]


class EnvironmentLoadError(ValueError):
    """An environment factory's import path is malformed or names nothing importable."""


def load_factory(path: str) -> EnvironmentFactory:
    """The factory named "package.module:factory" (`EnvironmentLoadError` naming it)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise EnvironmentLoadError(
            f"environment {path!r}: expected an import path 'package.module:factory'"
        )
    cwd = os.getcwd()  # a user's module lives where they run `seer`: the actor starts with
    if "" not in sys.path and cwd not in sys.path:  # `-P` (pipeline/launch/child.py), so the
        sys.path.append(cwd)  # working directory goes behind the installed packages
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise EnvironmentLoadError(f"environment {path!r}: cannot import it: {exc}") from None
    if not callable(factory):
        raise EnvironmentLoadError(f"environment {path!r} is not callable")
    return factory  # type: ignore[no-any-return]


async def resolve(value: Any) -> Any:
    """`value`, awaited when it is awaitable (environments may be sync or async)."""
    return await value if inspect.isawaitable(value) else value
