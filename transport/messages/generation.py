"""The generation link: scheduler <-> generators (chunks out, tokens and load back; the
parked KV of a finished rollout dropped)."""

from __future__ import annotations

from dataclasses import dataclass

from transport.messages.base import LogProbs, Message, Struct, TokenIds
from transport.messages.records import SpecStats
from transport.messages.rollout import SamplingSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadInfo(Struct):
    """A generator's load and cumulative engine counters (names as in the engine's)."""

    instance: int
    num_running: int
    num_waiting: int
    num_parked: int
    kv_tokens_used: int
    kv_tokens_total: int
    max_running: int
    weight_version: int
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_reprefilled_tokens: int = 0
    num_generated_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkAssigned(Message):
    """Scheduler -> generator: generate at most `max_chunk_tokens` more tokens of a request
    whose whole output may not pass `max_new_tokens` (its generation limit)."""

    rollout_id: str
    request_id: str
    chunk_seq: int
    prompt_ids: TokenIds
    generated_ids: TokenIds
    max_chunk_tokens: int
    max_new_tokens: int
    sampling: SamplingSpec
    weight_version: int
    group_id: str = ""
    is_probe: bool = False
    # the last this many of `generated_ids` are observation tokens of a multi-turn episode,
    # appended since its last chunk (no chunk generated them: the draft store lacks them)
    num_fresh_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkFinished(Message):
    """Generator -> scheduler: a chunk's tokens, why it ended, and the generator's load."""

    rollout_id: str
    request_id: str
    chunk_seq: int
    instance: int
    token_ids: TokenIds
    logprobs: LogProbs
    finish_reason: str
    weight_version: int
    start_time: float
    end_time: float
    num_cached_tokens: int
    load: LoadInfo
    error: str = ""
    spec: SpecStats = SpecStats()  # noqa: RUF009 (frozen: shared safely)


@dataclass(frozen=True, slots=True, kw_only=True)
class EndRollout(Message):
    """Scheduler -> generator: drop the parked KV of these requests."""

    rollout_id: str
    request_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GetLoad(Message):
    """Ask a generator for its `LoadReport`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadReport(Message):
    load: LoadInfo
