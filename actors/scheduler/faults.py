"""FaultBook: the scheduler's memory of chunks that did not finish, per generator.

A chunk that ends in "abort" (its engine stopped it, or failed it for a reason of its own)
or whose result is overdue is re-queued by the scheduler; this book says when a chunk is
overdue (`chunk_time_s`: `max(floor, slack * its token budget * the generator's measured
seconds per token)`), and when a generator has failed so many chunks in a row
(`max_instance_faults`) that it counts as lost (`failed`). A generator lost that way is
`faulty`: it stays lost for the rest of the rollout unless the trainer pushes it the
weights again. A chunk that comes back whole forgives its generator's faults (`served`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.scheduler.options import SchedulerOptions


@dataclass
class FaultBook:
    deadline_floor_s: float
    deadline_slack: float
    max_instance_faults: int
    pace: dict[int, float] = field(default_factory=dict)  # generator -> seconds per token
    in_row: dict[int, int] = field(default_factory=dict)  # generator -> failures since an ok
    faulty: set[int] = field(default_factory=set)  # lost for failing chunks (this rollout)
    # the running rollout's chunks (request, seq) -> (instance, when the result is overdue)
    deadlines: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    num_failed_chunks: int = 0

    @classmethod
    def of(cls, opts: SchedulerOptions) -> FaultBook:
        return cls(opts.chunk_deadline_floor_s, opts.chunk_deadline_slack, opts.max_instance_faults)

    def reset(self) -> None:
        """A fresh set of generators."""
        self.pace, self.in_row, self.faulty = {}, {}, set()

    def served(self, instance: int, elapsed_s: float, num_tokens: int) -> None:
        """A chunk came back whole after `elapsed_s` (from its dispatch)."""
        self.in_row[instance] = 0
        if num_tokens > 0:
            sample = elapsed_s / num_tokens
            last = self.pace.get(instance)
            self.pace[instance] = sample if last is None else 0.7 * last + 0.3 * sample

    def chunk_time_s(self, instance: int, max_chunk_tokens: int) -> float:
        """How long a chunk of `max_chunk_tokens` may take on `instance` before its result
        counts as lost."""
        pace = self.pace.get(instance, 0.0)
        return max(self.deadline_floor_s, self.deadline_slack * max_chunk_tokens * pace)

    def dispatched(self, request_id: str, seq: int, instance: int, tokens: int, now: float) -> None:
        """A chunk of at most `tokens` tokens went to `instance` at `now`."""
        due = now + self.chunk_time_s(instance, tokens)
        self.deadlines[(request_id, seq)] = (instance, due)

    def overdue(self, now: float) -> list[tuple[str, int, int]]:
        """The chunks (request, instance, seq) whose results are overdue at `now` (then
        forgotten)."""
        out = [(rid, i, seq) for (rid, seq), (i, due) in self.deadlines.items() if due <= now]
        for rid, _, seq in out:
            del self.deadlines[(rid, seq)]
        return out

    def failed(self, instance: int) -> int:
        """A chunk of `instance` did not finish: the failures in a row when that makes the
        generator lost (it is then `faulty`), else 0."""
        n = self.in_row[instance] = self.in_row.get(instance, 0) + 1
        self.num_failed_chunks += 1
        if n < self.max_instance_faults:
            return 0
        self.in_row[instance] = 0
        self.faulty.add(instance)
        return n

    def back(self, instance: int) -> None:
        """`instance` serves again (rejoined)."""
        self.faulty.discard(instance)
        self.in_row[instance] = 0
