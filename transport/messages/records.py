"""Rollout records: what the scheduler saw of one rollout (times are seconds since the
rollout began), and the speculation counters of one chunk. Pure records (`Struct`s) that
travel inside `RolloutFinished` and `ChunkFinished`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from transport.messages.base import Struct


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecStats(Struct):
    """Speculation over one chunk: verify steps, the tokens they emitted, draft nodes
    offered and accepted. Mean acceptance length (bonus token included) =
    num_tokens / num_steps."""

    num_steps: int = 0
    num_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


FINISH_REASONS: Final = ("chunk", "stop", "length", "abort", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRecord(Struct):
    """One dispatch of one request to one generator instance: `dispatched_s` when the
    scheduler sent it, `start_s` when the engine step that made its first token began,
    `end_s` when it finished. `generated_before`: the request's committed output length
    at dispatch; `num_reprefilled_tokens`: what the engine prefilled again because the KV
    was not there (a moved or evicted request). `finish_reason` is one of
    `FINISH_REASONS` ("chunk": the chunk budget was used up, the request goes back)."""

    request_id: str
    group_id: str
    instance: int
    chunk_seq: int
    dispatched_s: float
    start_s: float
    end_s: float
    num_new_tokens: int
    prompt_len: int
    generated_before: int
    num_reprefilled_tokens: int
    finish_reason: str
    weight_version: int = 0
    spec: SpecStats = SpecStats()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord(Struct):
    """One sample of a group, from its arrival at the scheduler to its final result."""

    request_id: str
    group_id: str
    prompt_id: str
    is_probe: bool
    prompt_len: int
    output_len: int
    arrival_s: float
    finish_s: float
    finish_reason: str
    # the scheduler's estimate of the group's longest output when this request's first
    # chunk was dispatched (0: none -- a probe, or a policy that keeps no estimate)
    estimate: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCounters(Struct):
    """Engine-side totals of one generator instance over the rollout."""

    instance: int
    num_preemptions: int
    num_recomputed_tokens: int
    num_reprefilled_tokens: int
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutRecord(Struct):
    """Everything the scheduler recorded about one rollout; it travels typed in
    `RolloutFinished`, and `pipeline.records.trace` saves and checks it as a file.
    ``requests``: the finished ones, in the order they arrived (requests arriving together
    share an ``arrival_s``; the order is what the scheduler's policies saw)."""

    policy: str
    num_instances: int
    chunks: tuple[ChunkRecord, ...]
    requests: tuple[RequestRecord, ...]
    instances: tuple[InstanceCounters, ...]
    makespan_s: float
