"""The environment actor's pure parts: checking and cutting observations, and the table of
live episodes (which environment belongs to which episode of which rollout)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from actors.environment.api import StepResult


class BadObservation(ValueError):
    """An environment returned something that is not token ids or text (or text it cannot
    encode); the message names the episode and what came back."""


def observation_ids(obs: object, env: object, episode: str) -> tuple[int, ...]:
    """Token ids of observation `obs` (text is encoded by `env.encode`)."""
    if isinstance(obs, str):
        encode = getattr(env, "encode", None)
        if not callable(encode):
            raise BadObservation(
                f"episode {episode!r}: the environment returned text but has no encode()"
            )
        obs = encode(obs)
        if isinstance(obs, str):
            raise BadObservation(f"episode {episode!r}: encode() returned text, not token ids")
    if isinstance(obs, (bytes, bytearray, Mapping)) or not isinstance(obs, Sequence):
        kind = type(obs).__name__
        raise BadObservation(f"episode {episode!r}: observation is a {kind}, not token ids or text")
    ids = tuple(obs)
    bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)
    if bad is not None:
        raise BadObservation(f"episode {episode!r}: observation holds {bad!r}, not a token id")
    return ids


def step_result(value: object, episode: str) -> StepResult:
    """A step's return value as a `StepResult` (a 3-tuple is taken too)."""
    if isinstance(value, StepResult):
        return value
    if isinstance(value, tuple) and len(value) == 3:
        obs, reward, done = value
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            return StepResult(obs, float(reward), bool(done))
    kind = type(value).__name__
    raise BadObservation(
        f"episode {episode!r}: step returned a {kind}, not a StepResult or "
        "(observation, reward, done)"
    )


def cut(
    ids: tuple[int, ...], limit: int, side: Literal["left", "right"]
) -> tuple[tuple[int, ...], int]:
    """`ids` cut to `limit` tokens on `side` ("right" keeps the first tokens, "left" the
    last), and how many were cut."""
    extra = len(ids) - limit
    if extra <= 0:
        return ids, 0
    return (ids[:limit] if side == "right" else ids[extra:]), extra


@dataclass(slots=True)
class Episode:
    rollout_id: str
    env: Any
    max_observation_tokens: int
    side: Literal["left", "right"]
    busy: bool = False  # a reset or step is running


class EpisodeTable:
    """request id -> its live `Episode`; episodes of older rollouts are stale."""

    def __init__(self) -> None:
        self.episodes: dict[str, Episode] = {}

    def open(self, request_id: str, episode: Episode) -> list[Episode]:
        """Add an episode; returns the episodes it replaces (same id, or an older rollout's:
        abandoned, to be closed)."""
        stale = [
            rid for rid, e in self.episodes.items()
            if e.rollout_id != episode.rollout_id or rid == request_id
        ]  # fmt: skip
        out = [self.episodes.pop(rid) for rid in stale]
        self.episodes[request_id] = episode
        return out

    def pop(self, rollout_id: str, request_ids: Sequence[str]) -> list[Episode]:
        """Remove these episodes of `rollout_id` (none named: all of them)."""
        if request_ids:
            ids = [r for r in request_ids if self.get(rollout_id, r) is not None]
        else:
            ids = [r for r, e in self.episodes.items() if e.rollout_id == rollout_id]
        return [self.episodes.pop(r) for r in ids]

    def get(self, rollout_id: str, request_id: str) -> Episode | None:
        e = self.episodes.get(request_id)
        return e if e is not None and e.rollout_id == rollout_id else None
