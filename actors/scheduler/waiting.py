"""WaitingIndex: the scheduler's waiting buffer, kept sorted by the policy's order, by home.

The core dispatches in the policy's order the first waiting requests it can place. Sorting
and scanning every waiting request for each dispatch costs time in proportion to the
requests in flight (thousands at Seer's scale, most of them unable to run until a slot or a
working-set place frees). This index keeps the waiting requests of a ``ranked`` policy
(``Policy.rank``) in sorted lists, one part per KV home (the instance that holds a started
request's context; None for requests with none), so that the core asks each part for its
first request after a cursor that a predicate accepts: a bisection, then usually one look.

Keys, comparable across parts, reproduce ``Policy.order`` exactly: ``(1, *policy.rank(req),
seq)``, ``seq`` counting entries into the buffer (the stable sort's tie order). Requests
that are starved (``Policy.is_starved``: ran a chunk, then waited past ``starvation_s``) are
also listed under ``(0, enqueued_at, arrival, seq)``, ahead of every rank, as promotion
candidates (``Policy.starved``'s order); they keep their ranked entry too, since the core
promotes only occasionally. A part moves requests that turned starved at ``refresh(now)``;
each request moves at most once per wait, so upkeep is O(log n) per request per chunk.
Pure and synchronous; it never decides anything, the core does.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any

from actors.scheduler.policy import Policy
from actors.scheduler.state import RequestState

__all__ = ["Key", "WaitingIndex"]

Key = tuple[Any, ...]
Entry = tuple[Key, RequestState]
_key = itemgetter(0)


class _Part:
    """The waiting requests of one home: starved ones oldest first; the others by rank and
    by age (to find those that turn starved)."""

    __slots__ = ("by_age", "ranked", "starved")

    def __init__(self) -> None:
        self.starved: list[Entry] = []  # keys (0, enqueued_at, arrival, seq)
        self.ranked: list[Entry] = []  # keys (1, *rank, seq): every waiting request
        self.by_age: list[Entry] = []  # started, not yet starved: (enqueued_at, arrival, seq)

    def __len__(self) -> int:
        return len(self.ranked)


def _remove(entries: list[Entry], key: Key) -> None:
    i = bisect_left(entries, key, key=_key)
    assert entries[i][0] == key, "waiting index out of step"
    del entries[i]


def _first_after(
    entries: list[Entry],
    cursor: Key,
    accept: Callable[[RequestState], bool] | None,
    before: Key | None,
) -> Entry | None:
    for i in range(bisect_right(entries, cursor, key=_key), len(entries)):
        if before is not None and entries[i][0] >= before:
            return None
        if accept is None or accept(entries[i][1]):
            return entries[i]
    return None


class WaitingIndex:
    def __init__(self, policy: Policy) -> None:
        if not policy.ranked:
            raise ValueError(f"policy {policy.name!r} has no rank to index by")
        self.policy = policy
        self._parts: dict[int | None, _Part] = {}
        # request id -> (home, age key (enqueued_at, arrival, seq), rank key, is starved)
        self._where: dict[str, tuple[int | None, Key, Key, bool]] = {}
        self._groups: dict[str, dict[str, RequestState]] = {}  # waiting members per group
        self._seq = 0
        self._now = float("-inf")

    def __len__(self) -> int:
        return len(self._where)

    def insert(self, req: RequestState, home: int | None, seq: int | None = None) -> None:
        """``req`` entered the waiting buffer (``seq``: keep its place among ties)."""
        if seq is None:
            seq, self._seq = self._seq, self._seq + 1
        part = self._parts.setdefault(home, _Part())
        age = (req.enqueued_at, req.arrival, seq)
        rank = self._rank_key(req, seq)
        insort(part.ranked, (rank, req), key=_key)
        if self._may_starve(req):
            insort(part.by_age, (age, req), key=_key)
        self._where[req.request_id] = (home, age, rank, False)
        self._groups.setdefault(req.group_id, {})[req.request_id] = req
        self._settle(part, self._now)

    def remove(self, req: RequestState) -> int:
        """``req`` left the waiting buffer; returns its tie order (``seq``)."""
        home, age, rank, starved = self._where.pop(req.request_id)
        part = self._parts[home]
        _remove(part.ranked, rank)
        if starved:
            _remove(part.starved, (0, *age))
        elif self._may_starve(req):
            _remove(part.by_age, age)
        if not len(part):
            del self._parts[home]
        members = self._groups[req.group_id]
        del members[req.request_id]
        if not members:
            del self._groups[req.group_id]
        seq: int = age[-1]
        return seq

    def rehome(self, req: RequestState, home: int | None) -> None:
        """A waiting request's KV home changed (its instance was lost)."""
        self.insert(req, home, seq=self.remove(req))

    def rerank_group(self, group_id: str) -> None:
        """The policy's ranks of ``group_id``'s members may have changed (a new estimate)."""
        for req in list(self._groups.get(group_id, {}).values()):
            home, age, rank, starved = self._where[req.request_id]
            new = self._rank_key(req, age[-1])
            if new != rank:
                part = self._parts[home]
                _remove(part.ranked, rank)
                insort(part.ranked, (new, req), key=_key)
                self._where[req.request_id] = (home, age, new, starved)

    def refresh(self, now: float) -> None:
        """Move the requests that are starved at ``now`` ahead (and back, if time went back)."""
        back = now < self._now
        self._now = now
        for part in self._parts.values():
            if back:
                self._unstarve(part, now)
            self._settle(part, now)

    def homes(self) -> Iterator[int | None]:
        """The homes with waiting requests."""
        return iter(list(self._parts))

    def first_after(
        self,
        home: int | None,
        cursor: Key,
        accept: Callable[[RequestState], bool] | None,
        before: Key | None = None,
        *,
        promote: bool = True,
    ) -> Entry | None:
        """The first request of ``home`` after ``cursor`` (and before ``before``) in the
        policy's order that ``accept`` takes (None: any), with its key; ``promote``: starved
        requests first (a promotion), else everyone by rank."""
        part = self._parts.get(home)
        if part is None:
            return None
        found = _first_after(part.starved, cursor, accept, before) if promote else None
        return found or _first_after(part.ranked, cursor, accept, before)

    def _rank_key(self, req: RequestState, seq: int) -> Key:
        return (1, *self.policy.rank(req), seq)

    def _may_starve(self, req: RequestState) -> bool:
        return self.policy.starvation_s is not None and req.chunk_seq > 0

    def _settle(self, part: _Part, now: float) -> None:
        """Oldest first, list the started requests that are starved at ``now``."""
        while part.by_age and self.policy.is_starved(part.by_age[0][1], now):
            age, req = part.by_age.pop(0)
            home, _, rank, _ = self._where[req.request_id]
            insort(part.starved, ((0, *age), req), key=_key)
            self._where[req.request_id] = (home, age, rank, True)

    def _unstarve(self, part: _Part, now: float) -> None:
        keep = []
        for key, req in part.starved:
            if self.policy.is_starved(req, now):
                keep.append((key, req))
                continue
            home, age, rank, _ = self._where[req.request_id]
            insort(part.by_age, (age, req), key=_key)
            self._where[req.request_id] = (home, age, rank, False)
        part.starved = keep
