"""What the scheduler records during one rollout: plain, frozen dataclasses.

Contract:
- All times are seconds since the rollout started (the scheduler's clock), floats.
- `ChunkRecord`: one dispatch of one request to one generator instance. `dispatched_s` is when
  the scheduler sent it, `start_s` when the engine ran its first step for it, `end_s` when it
  finished. `generated_before` is the request's committed output length at dispatch;
  `reprefill_tokens` the tokens the engine had to prefill again because the KV was not there
  (a moved or evicted request). `finish_reason` is "chunk" (chunk budget used up, the request
  goes back to the buffer), "stop", "length", "abort" or "error". `spec_*`: the chunk's
  verify steps, the tokens they emitted, and the draft nodes offered and accepted.
- `RequestRecord`: one sample of a group, from arrival at the scheduler to its final result.
- `InstanceCounters`: engine-side totals for one generator instance over the rollout.
- `RolloutRecord`: everything above plus the policy name, the number of instances and the
  makespan. `to_dict()` gives plain JSON-able data (lists, dicts, str, int, float, bool) and
  `from_dict()` rebuilds an equal record from it. Validation of untrusted files is the job of
  `pipeline.rollout.trace`, not of this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

FINISH_REASONS = ("chunk", "stop", "length", "abort", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRecord:
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
    reprefill_tokens: int
    finish_reason: str
    spec_steps: int = 0
    spec_tokens: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    request_id: str
    group_id: str
    prompt_id: str
    is_probe: bool
    prompt_len: int
    output_len: int
    arrival_s: float
    finish_s: float
    finish_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCounters:
    instance: int
    preemptions: int
    recomputed_tokens: int
    reprefill_tokens: int
    drafted_tokens: int = 0
    accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutRecord:
    policy: str
    num_instances: int
    chunks: tuple[ChunkRecord, ...]
    requests: tuple[RequestRecord, ...]
    instances: tuple[InstanceCounters, ...]
    makespan_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data; `from_dict(to_dict())` equals the record."""
        return {
            "policy": self.policy,
            "num_instances": self.num_instances,
            "makespan_s": self.makespan_s,
            "chunks": [dataclasses.asdict(c) for c in self.chunks],
            "requests": [dataclasses.asdict(r) for r in self.requests],
            "instances": [dataclasses.asdict(i) for i in self.instances],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        return cls(
            policy=str(data["policy"]),
            num_instances=int(data["num_instances"]),
            makespan_s=float(data["makespan_s"]),
            chunks=tuple(ChunkRecord(**c) for c in data["chunks"]),
            requests=tuple(RequestRecord(**r) for r in data["requests"]),
            instances=tuple(InstanceCounters(**i) for i in data["instances"]),
        )
