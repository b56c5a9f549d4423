"""The environment link: scheduler <-> environment actors (multi-turn episodes).

The scheduler opens an episode (`EnvironmentReset`), sends each turn's action tokens
(`EnvironmentStep`) and closes episodes that ended or were abandoned (`EnvironmentClose`);
the environment actor answers each reset and step with one `EnvironmentResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from transport.messages.base import Message, TokenIds
from transport.messages.rollout import MetaValue

EnvironmentFailure = Literal["", "env_error", "env_timeout", "bad_observation"]


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentReset(Message):
    """Scheduler -> environment actor: build the environment of episode `request_id` from
    `environment` ("package.module:factory") and call its `reset(prompt_ids, info)`; its
    observations are cut to `max_observation_tokens` on side `observation_cut`."""

    rollout_id: str
    request_id: str
    environment: str
    prompt_ids: TokenIds
    info: dict[str, MetaValue] = field(default_factory=dict)
    max_observation_tokens: int
    observation_cut: Literal["left", "right"] = "right"


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentStep(Message):
    """Scheduler -> environment actor: turn `turn` (1, 2, ...) of episode `request_id` ended
    with these action tokens: step its environment."""

    rollout_id: str
    request_id: str
    turn: int
    action_ids: TokenIds


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentClose(Message):
    """Scheduler -> environment actor: these episodes ended (or were abandoned): close
    their environments. No ids: every episode of `rollout_id` (an older rollout's left
    open are closed when the next rollout opens an episode there)."""

    rollout_id: str
    request_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentResult(Message):
    """Environment actor -> scheduler: the answer to turn `turn` of episode `request_id`
    (turn 0: its reset). `failure` (with `error`, the message) when the environment raised,
    timed out or returned neither token ids nor text: the episode ends, scored 0.
    `num_cut_tokens`: observation tokens cut to the budget."""

    rollout_id: str
    request_id: str
    turn: int
    instance: int
    observation_ids: TokenIds = ()
    reward: float = 0.0
    done: bool = False
    num_cut_tokens: int = 0
    failure: EnvironmentFailure = ""
    error: str = ""
