"""A simulated rollout's books and the records built from them.

``Book`` keeps, per request, what the simulation knows: the scheduler's ``RequestState``,
the chunk dispatched or running, how far it has generated (for the speculation side's
sibling counts), when and why it finished, and every ended chunk as a ``ChunkRecord``.
``rollout_record`` turns the books into the ``RolloutRecord`` a live rollout emits, so that
``compute_metrics`` and ``plot_timeline`` work on simulated runs as on live ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from actors.scheduler import RequestState
from pipeline.sim.instance import Chunk, SimInstance
from pipeline.sim.simulator.config import SimRequest
from transport.messages import (
    ChunkRecord,
    InstanceCounters,
    RequestRecord,
    RolloutRecord,
    SpecStats,
)

__all__ = ["Book", "rollout_record"]


@dataclass(slots=True)
class Book:
    """Per request (by its index in ``reqs``): the simulation's state and outcomes."""

    reqs: list[SimRequest]
    index: dict[str, int]  # request id -> its index
    members: dict[str, list[int]]  # group id -> its requests
    states: list[RequestState]  # the scheduler core's view of each request
    progress: list[float] = field(default_factory=list)  # tokens generated, at chunk ends
    chunk_of: dict[int, Chunk] = field(default_factory=dict)  # dispatched or running
    finish_s: list[float] = field(default_factory=list)
    finish_reason: list[str] = field(default_factory=list)
    chunks: list[ChunkRecord] = field(default_factory=list)  # every ended chunk

    @classmethod
    def open(cls, requests: Sequence[SimRequest]) -> Book:
        """The books of a rollout of ``requests``, none of them started."""
        if not requests:
            raise ValueError("simulate needs at least one request")
        reqs = list(requests)
        index = {r.request_id: i for i, r in enumerate(reqs)}
        if len(index) != len(reqs):
            raise ValueError("duplicate request ids")
        members: dict[str, list[int]] = {}
        for i, r in enumerate(reqs):
            members.setdefault(r.group_id, []).append(i)
        states = [
            RequestState(
                request_id=r.request_id,
                group_id=r.group_id,
                is_probe=r.is_probe,
                prompt_len=r.prompt_len,
                max_new_tokens=r.max_new_tokens,
                arrival=i,
            )
            for i, r in enumerate(reqs)
        ]
        n = len(reqs)
        return cls(
            reqs,
            index,
            members,
            states,
            progress=[0.0] * n,
            finish_s=[0.0] * n,
            finish_reason=["stop"] * n,
        )

    def generated(self, r: int) -> int:
        """Tokens request ``r`` has generated so far, as the simulation stands."""
        c = self.chunk_of.get(r)
        if c is None:
            return self.states[r].generated
        return int(c.ctx + 0.5) - self.reqs[r].prompt_len

    def add_chunk(self, instance: int, c: Chunk, num_new: int, before: int, reason: str) -> None:
        """Record an ended chunk that made ``num_new`` tokens after ``before``."""
        req = self.reqs[c.request]
        # verify steps are counted without speculation too (acceptance length 1.0), as live
        stats = SpecStats(
            num_steps=max(1, round(c.num_steps)),
            num_tokens=num_new,
            num_draft_tokens=round(c.num_draft_tokens),
            num_accepted_tokens=round(c.num_accepted_tokens),
        )
        self.chunks.append(
            ChunkRecord(
                request_id=req.request_id,
                group_id=req.group_id,
                instance=instance,
                chunk_seq=c.chunk_seq,
                dispatched_s=c.dispatched_s,
                start_s=max(c.start_s, c.dispatched_s),
                end_s=c.ended_s,
                num_new_tokens=num_new,
                prompt_len=req.prompt_len,
                generated_before=before,
                num_reprefilled_tokens=c.reprefilled,
                finish_reason=reason,
                spec=stats,
            )
        )


def rollout_record(
    book: Book,
    instances: Sequence[SimInstance],
    policy_name: str,
    makespan: float,
    estimates: Mapping[str, int] | None = None,
) -> RolloutRecord:
    """The rollout's record, as a live rollout's: its chunks, requests and instances;
    ``estimates``: the scheduler core's ``first_estimates``."""
    est = estimates or {}
    requests = tuple(
        RequestRecord(
            request_id=r.request_id,
            group_id=r.group_id,
            prompt_id=r.prompt_id,
            is_probe=r.is_probe,
            prompt_len=r.prompt_len,
            output_len=book.states[i].generated,
            arrival_s=0.0,
            finish_s=book.finish_s[i],
            finish_reason=book.finish_reason[i],
            estimate=est.get(r.request_id, 0),
        )
        for i, r in enumerate(book.reqs)
    )
    counters = tuple(
        InstanceCounters(
            instance=inst.index,
            num_preemptions=inst.counts["num_preemptions"],
            num_recomputed_tokens=inst.counts["num_recomputed_tokens"],
            num_reprefilled_tokens=inst.counts["num_reprefilled_tokens"],
            num_draft_tokens=inst.counts["num_draft_tokens"],
            num_accepted_tokens=inst.counts["num_accepted_tokens"],
        )
        for inst in instances
    )
    return RolloutRecord(
        policy=policy_name,
        num_instances=len(instances),
        chunks=tuple(book.chunks),
        requests=requests,
        instances=counters,
        makespan_s=makespan,
    )
