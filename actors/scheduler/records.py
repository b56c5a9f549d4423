"""RunBook: what the scheduler records about one rollout, independent of the policy.

Per request: its spec, tokens and logprobs so far, chunks (instance, dispatch, start, end,
re-prefilled tokens, finish reason) and its finish. At the end it yields the samples for
the driver and the rollout record as a JSON-able dict (the shape of
`pipeline.rollout.records.RolloutRecord.to_dict()`), with per-instance counter deltas
(preemptions, recomputed and re-prefilled tokens) over the rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transport.messages import ChunkFinished, LoadReport, RequestSpec, SampleResult


class RunBook:
    def __init__(
        self,
        rollout_id: str,
        policy: str,
        specs: Sequence[RequestSpec],
        start_loads: Sequence[LoadReport],
        start: float,
    ) -> None:
        self.rollout_id = rollout_id
        self.policy = policy
        self.start = start
        self.specs = {s.request_id: s for s in specs}
        self.tokens: dict[str, list[int]] = {s.request_id: [] for s in specs}
        self.logprobs: dict[str, list[float]] = {s.request_id: [] for s in specs}
        self.chunks: list[dict[str, Any]] = []
        self.finished: dict[str, dict[str, Any]] = {}
        self.weight_version: dict[str, int] = {}
        self.start_loads = list(start_loads)
        self.end_time = start

    def add_chunk(self, msg: ChunkFinished, dispatched_s: float) -> None:
        rid = msg.request_id
        spec = self.specs[rid]
        before = len(self.tokens[rid])
        context = len(spec.prompt_ids) + before
        reprefill = max(0, context - msg.cached_tokens) if before else 0
        self.tokens[rid].extend(msg.token_ids)
        self.logprobs[rid].extend(msg.logprobs)
        self.weight_version[rid] = msg.weight_version
        self.end_time = max(self.end_time, msg.end_time)
        self.chunks.append(
            {
                "request_id": rid,
                "group_id": spec.group_id,
                "instance": msg.instance,
                "chunk_seq": msg.chunk_seq,
                "dispatched_s": dispatched_s,
                "start_s": msg.start_time - self.start,
                "end_s": msg.end_time - self.start,
                "num_new_tokens": len(msg.token_ids),
                "prompt_len": len(spec.prompt_ids),
                "generated_before": before,
                "reprefill_tokens": reprefill,
                "finish_reason": msg.finish_reason,
                "spec_steps": msg.spec.steps if msg.spec else 0,
                "spec_tokens": msg.spec.tokens if msg.spec else 0,
                "spec_drafted": msg.spec.drafted if msg.spec else 0,
                "spec_accepted": msg.spec.accepted if msg.spec else 0,
            }
        )
        if msg.finish_reason != "chunk":
            self.finished[rid] = {
                "request_id": rid,
                "group_id": spec.group_id,
                "prompt_id": spec.prompt_id,
                "is_probe": spec.is_probe,
                "prompt_len": len(spec.prompt_ids),
                "output_len": len(self.tokens[rid]),
                "arrival_s": 0.0,
                "finish_s": msg.end_time - self.start,
                "finish_reason": msg.finish_reason,
            }

    def samples(self) -> tuple[SampleResult, ...]:
        out = []
        for rid, spec in self.specs.items():
            mine = [c for c in self.chunks if c["request_id"] == rid]
            out.append(
                SampleResult(
                    request_id=rid,
                    group_id=spec.group_id,
                    prompt_id=spec.prompt_id,
                    index=spec.index,
                    token_ids=tuple(self.tokens[rid]),
                    logprobs=tuple(self.logprobs[rid]),
                    finish_reason=self.finished.get(rid, {}).get("finish_reason", "abort"),
                    weight_version=self.weight_version.get(rid, -1),
                    start_s=min((c["start_s"] for c in mine), default=0.0),
                    end_s=max((c["end_s"] for c in mine), default=0.0),
                    num_chunks=len(mine),
                )
            )
        return tuple(out)

    def record(self, end_loads: Sequence[LoadReport]) -> dict[str, Any]:
        instances = []
        for a, b in zip(self.start_loads, end_loads, strict=True):
            x, y = a.load, b.load
            instances.append(
                {
                    "instance": y.instance,
                    "preemptions": y.preemptions - x.preemptions,
                    "recomputed_tokens": y.recomputed_tokens - x.recomputed_tokens,
                    "reprefill_tokens": y.reprefilled_tokens - x.reprefilled_tokens,
                    "drafted_tokens": y.drafted_tokens - x.drafted_tokens,
                    "accepted_tokens": y.accepted_tokens - x.accepted_tokens,
                }
            )
        return {
            "policy": self.policy,
            "num_instances": len(instances),
            "chunks": self.chunks,
            "requests": list(self.finished.values()),
            "instances": instances,
            "makespan_s": self.end_time - self.start,
        }
