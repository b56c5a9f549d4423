"""RunningBatch: the running requests, one per KV slot, decoders first.

Slots ``[0, num_decode)`` hold decoding requests and ``[num_decode, len)`` prefilling ones,
so each kind is a contiguous run of slots that one forward reads as a view. Adding and
removing rows moves KV between slots to keep both runs contiguous and the prefilling rows in
the order they were admitted (chunked prefill serves the first-admitted first).
``ParkedStore`` holds the KV of requests between chunks, least-recently-used first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from actors.generator.builtin.kv_cache import KVCache, ParkedKV
from actors.generator.builtin.request import EngineRequest, Phase


class RunningBatch:
    def __init__(self, cache: KVCache) -> None:
        self.cache = cache
        self.rows: list[EngineRequest] = []
        self.num_decode = 0

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def decoding(self) -> list[EngineRequest]:
        return self.rows[: self.num_decode]

    @property
    def reserved(self) -> int:
        return sum(r.reserved for r in self.rows)

    def add_prefill(self, state: EngineRequest) -> int:
        """Append a prefilling row; returns its slot."""
        state.phase = Phase.PREFILL
        self.rows.append(state)
        return len(self.rows) - 1

    def add_decode(self, state: EngineRequest) -> int:
        """Insert a decoding row after the decoders; returns its slot (its KV is not set).
        The prefilling rows move up one slot each, keeping their order."""
        slot = self.num_decode
        self.rows.append(state)
        for j in range(len(self.rows) - 1, slot, -1):
            self._move_row(j - 1, j)
        self.rows[slot] = state
        state.phase = Phase.DECODE
        self.num_decode += 1
        return slot

    def promote(self, slot: int) -> None:
        """The prefilling row at ``slot`` (== num_decode) finished its prefill."""
        assert slot == self.num_decode, "prefill rows complete in slot order"
        self.rows[slot].phase = Phase.DECODE
        self.num_decode += 1

    def remove(self, slot: int) -> EngineRequest:
        """Take the row at ``slot`` out (its KV is dropped), keeping both runs contiguous and
        the prefilling rows in their order (they prefill first-admitted first)."""
        state = self.rows[slot]
        start = slot + 1
        if slot < self.num_decode:
            last_dec = self.num_decode - 1
            self._move_row(last_dec, slot)  # decoders' order does not matter
            self.num_decode -= 1
            start = last_dec + 1
        for j in range(start, len(self.rows)):
            self._move_row(j, j - 1)
        self.rows.pop()
        return state

    def slot_of(self, state: EngineRequest) -> int:
        return next(i for i, r in enumerate(self.rows) if r is state)

    def _move_row(self, src: int, dst: int) -> None:
        if src != dst:
            self.cache.move(src, dst, self.rows[src].cache_len)
            self.rows[dst] = self.rows[src]


@dataclass(frozen=True, slots=True)
class ParkedEntry:
    tokens: list[int]  # the sequence whose first ``kv.num_tokens`` tokens have KV
    kv: ParkedKV

    def reusable(self, tokens: list[int]) -> int:
        """Leading tokens of ``tokens`` with valid KV here (at most all but the last)."""
        limit = min(self.kv.num_tokens, len(tokens) - 1)
        same = 0
        while same < limit and self.tokens[same] == tokens[same]:
            same += 1
        return same


class ParkedStore:
    """request id -> parked KV, in least-recently-used order."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, ParkedEntry] = OrderedDict()
        self.num_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._entries

    def get(self, request_id: str) -> ParkedEntry | None:
        return self._entries.get(request_id)

    def put(self, request_id: str, entry: ParkedEntry) -> None:
        self.pop(request_id)
        self._entries[request_id] = entry
        self.num_tokens += entry.kv.num_tokens

    def pop(self, request_id: str) -> ParkedEntry | None:
        entry = self._entries.pop(request_id, None)
        if entry is not None:
            self.num_tokens -= entry.kv.num_tokens
        return entry

    def evict(self, keep: str | None = None, queue: Sequence[str] = ()) -> bool:
        """Drop one entry other than ``keep``'s; False if none. First the least recently
        used of the requests not in ``queue`` (the waiting requests, in order); then the
        queued request that runs last, whose KV is needed furthest ahead. Least recently
        used alone cascades when several chunks end in one step and their next chunks
        queue behind a request that needs room: that request evicts the first one's KV,
        the first then prefills again and evicts the second's, and so on through all."""
        queued = set(queue)
        victim = next((r for r in self._entries if r != keep and r not in queued), None)
        if victim is None:
            victim = next((r for r in reversed(queue) if r != keep and r in self._entries), None)
        if victim is None:
            return False
        self.pop(victim)
        return True

    def clear(self) -> None:
        self._entries.clear()
        self.num_tokens = 0
