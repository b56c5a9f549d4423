"""PrefixIndex: which parked engine request holds the KV of which whole token sequence.

SGLang keeps finished requests' KV in its radix cache, so the next chunk of a sample (its
``input_ids`` = prompt + everything generated so far) prefills only its last token. The
built-in engine parks a chunk's KV under the chunk's own request id; this index maps the
chunk's whole sequence to that id, so a later request with exactly those ``input_ids``
resumes on it. Bounded (least recently indexed out first); the caller releases what this
hands back. Pure book-keeping, no engine calls.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_INDEXED = 4096


class PrefixIndex:
    def __init__(self, capacity: int = MAX_INDEXED) -> None:
        self.capacity = capacity
        self._ids: OrderedDict[tuple[int, ...], str] = OrderedDict()
        self.num_tokens = 0  # KV tokens the indexed entries hold (while not evicted)

    def __len__(self) -> int:
        return len(self._ids)

    def put(self, tokens: tuple[int, ...], engine_id: str) -> list[str]:
        """Index ``tokens`` -> ``engine_id``; the ids whose KV is no longer wanted."""
        dropped = []
        old = self.take(tokens)
        if old is not None:  # the same sequence again: keep the newest KV only
            dropped.append(old)
        self._ids[tokens] = engine_id
        self.num_tokens += len(tokens) - 1  # the last token has no KV yet
        while len(self._ids) > self.capacity:
            key, oldest = self._ids.popitem(last=False)
            self.num_tokens -= len(key) - 1
            dropped.append(oldest)
        return dropped

    def take(self, tokens: tuple[int, ...]) -> str | None:
        """The engine id parked with exactly ``tokens``, removed from the index."""
        engine_id = self._ids.pop(tokens, None)
        if engine_id is not None:
            self.num_tokens -= len(tokens) - 1
        return engine_id

    def clear(self) -> list[str]:
        """Forget everything; every id that was indexed."""
        ids = list(self._ids.values())
        self._ids.clear()
        self.num_tokens = 0
        return ids

    def cached_tokens(self, num_parked: int) -> int:
        """KV tokens held, scaled down when the engine has evicted some of the entries on
        its own (it parks nothing else, so ``num_parked`` below our count means evictions)."""
        n = len(self._ids)
        return self.num_tokens * min(num_parked, n) // n if n else 0
