"""RunBook: what the scheduler records about one rollout, independent of the policy.

Per request: its spec, arrival, tokens and logprobs so far (a multi-turn episode's
observation tokens too, with logprob 0: `observe`), its chunks (a `ChunkRecord`
each: instance, dispatch, start, end, re-prefilled tokens, weight version, speculation,
finish reason), its finish and why it failed (an engine error's message, if any). At the
end it yields the samples for the driver and the `RolloutRecord`, with per-instance counter
deltas (preemptions, recomputed and re-prefilled tokens, draft tokens) over the rollout.
Times are seconds since the rollout's start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from transport.messages import (
    ChunkFinished,
    ChunkRecord,
    EpisodeResult,
    InstanceCounters,
    LoadInfo,
    RequestRecord,
    RequestSpec,
    RolloutRecord,
    SampleResult,
)


class RunBook:
    def __init__(
        self,
        rollout_id: str,
        policy: str,
        specs: Sequence[RequestSpec],
        start_loads: Sequence[LoadInfo],
        start: float,
    ) -> None:
        self.rollout_id = rollout_id
        self.policy = policy
        self.start = start
        self.specs = {s.request_id: s for s in specs}
        self.arrival_s = dict.fromkeys(self.specs, 0.0)
        self.tokens: dict[str, list[int]] = {rid: [] for rid in self.specs}
        self.logprobs: dict[str, list[float]] = {rid: [] for rid in self.specs}
        self.chunks: dict[str, list[ChunkRecord]] = {rid: [] for rid in self.specs}
        self.finished: dict[str, RequestRecord] = {}
        self.errors: dict[str, str] = {}  # why a request ended in "error"
        # observation tokens appended since the request's last chunk: prefilled, not re-prefilled
        self.fresh: dict[str, int] = {}
        self.start_loads = list(start_loads)
        self.end_time = start

    def arrive(self, request_ids: Sequence[str], now_s: float) -> None:
        """These requests entered the scheduler's buffer `now_s` after the start."""
        for rid in request_ids:
            self.arrival_s[rid] = now_s

    def observe(self, request_id: str, token_ids: tuple[int, ...]) -> None:
        """An episode's observation tokens join the request's context (logprob 0)."""
        self.tokens[request_id].extend(token_ids)
        self.logprobs[request_id].extend([0.0] * len(token_ids))
        self.fresh[request_id] = self.fresh.get(request_id, 0) + len(token_ids)

    def add_chunk(self, msg: ChunkFinished, dispatched_s: float, *, finished: bool = True) -> None:
        """A chunk's result; `finished` False: its end is a turn's, not the request's."""
        rid = msg.request_id
        spec = self.specs[rid]
        before = len(self.tokens[rid])
        prior = before - self.fresh.pop(rid, 0)  # tokens the engine had seen (KV it could hold)
        reprefilled = max(0, len(spec.prompt_ids) + prior - msg.num_cached_tokens) if prior else 0
        self.tokens[rid].extend(msg.token_ids)
        self.logprobs[rid].extend(msg.logprobs)
        self.end_time = max(self.end_time, msg.end_time)
        self.chunks[rid].append(
            ChunkRecord(
                request_id=rid,
                group_id=spec.group_id,
                instance=msg.instance,
                chunk_seq=msg.chunk_seq,
                dispatched_s=dispatched_s,
                start_s=msg.start_time - self.start,
                end_s=msg.end_time - self.start,
                num_new_tokens=len(msg.token_ids),
                prompt_len=len(spec.prompt_ids),
                generated_before=before,
                num_reprefilled_tokens=reprefilled,
                finish_reason=msg.finish_reason,
                weight_version=msg.weight_version,
                spec=msg.spec,
            )
        )
        if msg.error:
            self.errors[rid] = msg.error
        if msg.finish_reason != "chunk" and finished:
            self.finish(rid, msg.finish_reason, msg.end_time - self.start)

    def finish(self, request_id: str, finish_reason: str, now_s: float) -> None:
        """Request `request_id` is complete (`now_s` after the start)."""
        spec = self.specs[request_id]
        self.finished[request_id] = RequestRecord(
            request_id=request_id,
            group_id=spec.group_id,
            prompt_id=spec.prompt_id,
            is_probe=spec.is_probe,
            prompt_len=len(spec.prompt_ids),
            output_len=len(self.tokens[request_id]),
            arrival_s=self.arrival_s[request_id],
            finish_s=now_s,
            finish_reason=finish_reason,
        )

    def samples(
        self, episodes: Mapping[str, EpisodeResult] | None = None
    ) -> tuple[SampleResult, ...]:
        """Every request's sample (`episodes`: multi-turn requests' trajectory records)."""
        episodes = episodes or {}
        out = []
        for rid, spec in self.specs.items():
            mine = self.chunks[rid]
            done = self.finished.get(rid)
            out.append(
                SampleResult(
                    request_id=rid,
                    group_id=spec.group_id,
                    prompt_id=spec.prompt_id,
                    index=spec.index,
                    token_ids=tuple(self.tokens[rid]),
                    logprobs=tuple(self.logprobs[rid]),
                    finish_reason=done.finish_reason if done is not None else "abort",
                    weight_versions=tuple(c.weight_version for c in mine),
                    start_s=min((c.start_s for c in mine), default=0.0),
                    end_s=max((c.end_s for c in mine), default=0.0),
                    error=self.errors.get(rid, ""),
                    episode=episodes.get(rid),
                )
            )
        return tuple(out)

    def record(
        self, end_loads: Sequence[LoadInfo], estimates: Mapping[str, int] | None = None
    ) -> RolloutRecord:
        """The rollout's record; ``estimates``: the scheduler core's ``first_estimates``
        (each request's group estimate at its first dispatch), set on its requests."""
        est = estimates or {}
        instances = tuple(
            InstanceCounters(
                instance=y.instance,
                num_preemptions=y.num_preemptions - x.num_preemptions,
                num_recomputed_tokens=y.num_recomputed_tokens - x.num_recomputed_tokens,
                num_reprefilled_tokens=y.num_reprefilled_tokens - x.num_reprefilled_tokens,
                num_draft_tokens=y.num_draft_tokens - x.num_draft_tokens,
                num_accepted_tokens=y.num_accepted_tokens - x.num_accepted_tokens,
            )
            for x, y in zip(self.start_loads, end_loads, strict=True)
        )
        chunks = sorted((c for mine in self.chunks.values() for c in mine), key=lambda c: c.end_s)
        return RolloutRecord(
            policy=self.policy,
            num_instances=len(instances),
            chunks=tuple(chunks),
            # in arrival order (the scheduler's `arrival`): a replay admits them in it
            requests=tuple(
                dataclasses.replace(self.finished[rid], estimate=est[rid])
                if rid in est
                else self.finished[rid]
                for rid in self.specs
                if rid in self.finished
            ),
            instances=instances,
            makespan_s=self.end_time - self.start,
        )
