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
- ``reward`` should not raise on a completion (garbage scores 0); one that raises anyway
  scores 0 and is counted (`pipeline.tasks.scoring.safe_reward`, the run's
  ``num_reward_errors``).
- All randomness comes from the ``numpy.random.Generator`` passed in: the same seed gives the
  same prompts and examples.
- ``sft_example`` may raise ``NotImplementedError`` for a task with no known answers (a text
  task over a reward function); such a task says so with ``supports_sft = False`` and a run
  on it needs ``warm_start_steps = 0`` (``supports_sft(task)``).

Optional members the run looks for: ``supports_sft`` (above), ``stop_token_ids`` (every
token that ends a sample, the EOS among them; a HF folder may have several),
``check_prompt_lengths(max_prompt_tokens)`` (raise ``PromptTooLongError`` for a prompt
that cannot fit the model's context, before any rollout), ``difficulty`` and
``first_error`` (the curriculum and step credit).

A multi-turn task (docs/multiturn.md) also has ``episode``, the ``EpisodeSpec`` every prompt
runs as (its environment gets the prompt's ``meta`` as ``env_info``; the run adds
environment actors), and may have ``sft_episode(prompt, rng) -> (tokens, loss_mask)`` (the
warm start's whole trajectories, observations masked out), ``success(episode)`` (which
episodes count as successes; else reward 1) and ``min_new_tokens()`` (the episode budget
its turns need; a run with less is refused).

``get_task(spec)`` finds a task by a registered name (``register_task`` adds one) or by an
import path ``"package.module:factory"``, the way actor kinds are named.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from pipeline.launch.child import allow_working_dir_imports
from transport.messages import EpisodeSpec


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


class TaskError(ValueError):
    """A task that cannot be found, built or used as asked; the message names the spec,
    file or field at fault."""


class PromptTooLongError(TaskError):
    """A prompt with more tokens than the model can take (found before any rollout)."""


def supports_sft(task: Task) -> bool:
    """Whether `task.sft_example` gives answers (a supervised warm start is possible)."""
    return bool(getattr(task, "supports_sft", True))


def stop_token_ids(task: Task) -> tuple[int, ...]:
    """Every token that ends a sample of `task`: its `stop_token_ids`, else its EOS."""
    stops = getattr(task, "stop_token_ids", None)
    return tuple(int(t) for t in stops) if stops else (int(task.eos_token_id),)


def check_prompt_lengths(task: Task, max_prompt_tokens: int) -> None:
    """`PromptTooLongError` naming the first prompt of `task` longer than
    `max_prompt_tokens`, for a task that knows its prompts (`check_prompt_lengths`); a task
    that draws fresh prompts each time is not asked."""
    check = getattr(task, "check_prompt_lengths", None)
    if check is not None:
        check(max_prompt_tokens)


def episode_spec(task: Task) -> EpisodeSpec | None:
    """The multi-turn episode `task` runs its prompts as (None: a single-turn task).
    `TaskError` when its `episode` is not an `EpisodeSpec`."""
    spec = getattr(task, "episode", None)
    if spec is not None and not isinstance(spec, EpisodeSpec):
        raise TaskError(
            f"task {task.name!r}: `episode` must be a transport.messages.EpisodeSpec, "
            f"not a {type(spec).__name__}"
        )
    return spec


def check_episode_budget(task: Task, max_new_tokens: int) -> None:
    """`TaskError` when a multi-turn task's turns need more tokens than `max_new_tokens`
    (the episode's whole budget after the prompt: actions and observations)."""
    need = getattr(task, "min_new_tokens", None)
    if episode_spec(task) is not None and need is not None and max_new_tokens < need():
        raise TaskError(
            f"task {task.name!r}: max_new_tokens {max_new_tokens} is less than the "
            f"{need()} tokens its episodes' turns need (actions and observations)"
        )


_REGISTRY: dict[str, Callable[[], Task]] = {}


def register_task(name: str, factory: Callable[[], Task]) -> None:
    """Make ``get_task(name)`` return ``factory()``; a name registers once."""
    if name in _REGISTRY:
        raise ValueError(f"task {name!r} is already registered")
    _REGISTRY[name] = factory


def task_names() -> list[str]:
    return sorted(_REGISTRY)


#: the members a `Task` must have (`get_task` names the missing ones)
TASK_MEMBERS = (
    "name",
    "vocab_size",
    "eos_token_id",
    "sample_prompts",
    "reward",
    "sft_example",
    "render",
)


def get_task(spec: str, *, model_dir: str | None = None) -> Task:
    """A fresh task: `spec` is a registered name or an import path
    ``"package.module:factory"`` (the working directory is importable, so
    ``"examples.custom_task:make_task"`` works from the repository root).

    The factory is called with no arguments, or with ``model_dir=`` when it takes that
    keyword: the run's model folder (None when the run has none), where a text task finds
    its tokenizer. `TaskError` (a `ValueError`) names the spec when the name is unknown, the
    module does not import, the attribute is missing, the factory raises, or what it returns
    is not a `Task`."""
    factory = _REGISTRY.get(spec)
    if factory is None:
        if ":" not in spec:
            raise TaskError(
                f"unknown task {spec!r}; known tasks: {', '.join(task_names())}, "
                "or an import path 'package.module:factory'"
            )
        factory = _import_factory(spec)
    try:
        task = _call_factory(factory, model_dir)
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(f"task {spec!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    _check_task(spec, task)
    checked: Task = task
    return checked


def _import_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TaskError(f"task {spec!r} is not 'package.module:factory'")
    allow_working_dir_imports()  # a user's module lives where they run `seer`
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise TaskError(
            f"task {spec!r}: module {module_name!r} does not import: {type(exc).__name__}: {exc}"
        ) from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise TaskError(f"task {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(factory):
        kind = type(factory).__name__
        raise TaskError(f"task {spec!r}: {attr!r} is a {kind}, not a factory returning a Task")
    return factory  # type: ignore[no-any-return]


def _call_factory(factory: Callable[..., Any], model_dir: str | None) -> Any:
    """`factory()`, or `factory(model_dir=...)` when it takes that keyword."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        params = {}  # type: ignore[assignment]
    takes = "model_dir" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
    return factory(model_dir=model_dir) if takes else factory()


def _check_task(spec: str, task: Any) -> None:
    missing = [m for m in TASK_MEMBERS if not hasattr(task, m)]
    if missing:
        kind = type(task).__name__
        raise TaskError(
            f"task {spec!r}: the factory returned a {kind}, not a Task (missing "
            f"{', '.join(missing)})"
        )
    vocab, eos = task.vocab_size, task.eos_token_id
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise TaskError(f"task {spec!r}: vocab_size must be a positive int, got {vocab!r}")
    if not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos < vocab:
        raise TaskError(f"task {spec!r}: eos_token_id must be an int in [0, {vocab}), got {eos!r}")
