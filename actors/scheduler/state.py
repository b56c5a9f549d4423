"""The scheduler's books: one request's progress, one instance's load, one dispatch.

Plain data, no behaviour beyond small derived properties. ``RequestState`` is mutable and
owned by ``SchedulerCore`` (policies read it, never write it). ``InstanceLoad`` is the
telemetry a generator reports; ``ProjectedLoad`` is the core's working view of an instance:
the last telemetry plus what the core dispatched since (in-flight chunks and their KV).
``Dispatch`` is the core's decision: run this request's next chunk there, for at most
``max_chunk_tokens`` new tokens, tagged with ``chunk_seq`` so that a stale result can be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "UNBOUNDED_KV",
    "Dispatch",
    "InstanceLoad",
    "ProjectedLoad",
    "RequestState",
    "RequestStatus",
    "UnknownRequestError",
]

RequestStatus = Literal["waiting", "running", "environment", "finished"]

# KV budget assumed before an instance reports telemetry: no KV limit, only slots.
UNBOUNDED_KV = 1 << 62


class UnknownRequestError(KeyError):
    """A chunk result (or lookup) for a request id that was never added."""

    def __init__(self, request_id: str) -> None:
        super().__init__(request_id)
        self.request_id = request_id

    def __str__(self) -> str:
        return f"unknown request id {self.request_id!r}: it was never added to the scheduler"


@dataclass(slots=True, kw_only=True)
class RequestState:
    """One sample's progress through the rollout (mutated only by ``SchedulerCore``)."""

    request_id: str
    group_id: str
    is_probe: bool
    prompt_len: int
    max_new_tokens: int  # the generation limit (Seer's "original max")
    arrival: int  # order the request entered the system (0, 1, 2, ...)
    generated: int = 0  # tokens committed by finished chunks
    status: RequestStatus = "waiting"
    instance: int | None = None  # where its current chunk runs (when running)
    kv_instance: int | None = None  # the instance that still holds its KV (where it last ran)
    enqueued_at: float = 0.0  # when it (re-)entered the waiting buffer
    chunk_seq: int = 0  # incremented at every dispatch; results carry it
    # a multi-turn episode's action tokens per turn (0: no per-turn limit) and this turn's
    turn_limit: int = 0
    turn_generated: int = 0

    @property
    def remaining(self) -> int:
        """Tokens it may still generate before its generation limit."""
        return max(0, self.max_new_tokens - self.generated)

    @property
    def turn_left(self) -> int:
        """Tokens this turn may still generate (its episode's limit when turns have none)."""
        if not self.turn_limit:
            return self.remaining
        return min(self.remaining, self.turn_limit - self.turn_generated)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceLoad:
    """Telemetry from a generator."""

    index: int
    num_running: int  # requests resident and decoding in the engine
    num_waiting: int  # requests queued in the engine, not running yet
    kv_tokens_used: int  # KV tokens in use (running + parked)
    kv_tokens_total: int  # KV budget in tokens
    max_running: int  # engine batch slots


@dataclass(slots=True, kw_only=True)
class ProjectedLoad:
    """The core's view of an instance: telemetry plus chunks dispatched since.

    ``num_running`` counts the core's own in-flight chunks there (exact: the core sees every
    dispatch and every result); ``kv_tokens_used`` is the last telemetry's figure plus the projected
    KV (prompt + generated + max_chunk_tokens) of chunks dispatched after that telemetry.
    """

    index: int
    num_running: int = 0
    kv_tokens_used: int = 0
    kv_tokens_total: int = UNBOUNDED_KV
    max_running: int = 1

    @property
    def kv_fraction(self) -> float:
        return self.kv_tokens_used / self.kv_tokens_total if self.kv_tokens_total > 0 else 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Dispatch:
    """Run ``request_id``'s next chunk on ``instance`` for at most ``max_chunk_tokens`` tokens."""

    request_id: str
    instance: int
    max_chunk_tokens: int  # tokens this chunk may generate
    chunk_seq: int
