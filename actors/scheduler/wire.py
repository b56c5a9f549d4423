"""The scheduler's wire <-> domain conversions, in one place beside its shell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from actors.scheduler.state import Dispatch, InstanceLoad, RequestState
from transport.messages import ChunkAssigned, LoadInfo, RequestSpec


class _Tokens(Protocol):
    """What `chunk_assigned` reads of the run book (`runbook.RunBook`)."""

    @property
    def tokens(self) -> Mapping[str, Sequence[int]]: ...
    @property
    def fresh(self) -> Mapping[str, int]: ...


def instance_load(load: LoadInfo) -> InstanceLoad:
    """A generator's telemetry as the core sees it."""
    return InstanceLoad(
        index=load.instance,
        num_running=load.num_running,
        num_waiting=load.num_waiting,
        kv_tokens_used=load.kv_tokens_used,
        kv_tokens_total=load.kv_tokens_total,
        max_running=load.max_running,
    )


def request_state(spec: RequestSpec, arrival: int) -> RequestState:
    """The scheduler's view of a request: the generation limit, never a forced length."""
    return RequestState(
        request_id=spec.request_id,
        group_id=spec.group_id,
        is_probe=spec.is_probe,
        prompt_len=len(spec.prompt_ids),
        max_new_tokens=spec.sampling.max_new_tokens,
        arrival=arrival,
        turn_limit=spec.episode.max_turn_tokens if spec.episode is not None else 0,
    )


def chunk_assigned(
    rollout_id: str, d: Dispatch, spec: RequestSpec, book: _Tokens, weight_version: int
) -> ChunkAssigned:
    """The message that runs dispatch `d` (a forced length, benchmarks only, caps the total):
    the request's tokens so far from the run's `book`, with how many of them are an
    episode's observation appended since its last chunk (`num_fresh_tokens`)."""
    return ChunkAssigned(
        rollout_id=rollout_id,
        request_id=d.request_id,
        chunk_seq=d.chunk_seq,
        prompt_ids=spec.prompt_ids,
        generated_ids=tuple(book.tokens[d.request_id]),
        max_chunk_tokens=d.max_chunk_tokens,
        max_new_tokens=spec.forced_len or spec.sampling.max_new_tokens,
        sampling=spec.sampling,
        weight_version=weight_version,
        group_id=spec.group_id,
        is_probe=spec.is_probe,
        num_fresh_tokens=book.fresh.get(d.request_id, 0),
    )
