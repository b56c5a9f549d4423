"""Batcher: who runs this step, and the KV budget's books.

Owns the waiting queue (FIFO; preempted requests go back to its front), the running batch
and the parked store. ``admit`` moves waiting requests into free slots while their KV and
the coming step's growth of the decoding rows fit (evicting parked KV, never the request's
own: least-recently-used among requests not queued, then the queued request that runs
last, ``ParkedStore.evict``), reusing a parked request's KV for the longest common prefix of
its tokens. ``make_room`` makes the coming decode step fit the budget: evict parked KV,
then trim drafts, then preempt the most recently admitted request as vLLM and SGLang do
(its KV is dropped; it is recomputed when re-admitted). Booked KV = running reservations +
parked tokens; with a step's transient draft tokens it never exceeds ``kv_budget_tokens``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from actors.generator.builtin.batch import ParkedEntry, ParkedStore, RunningBatch
from actors.generator.builtin.config import EngineConfig
from actors.generator.builtin.draft_tree import DraftTree
from actors.generator.builtin.kv_cache import KVCache
from actors.generator.builtin.request import EngineRequest, Phase
from actors.generator.builtin.step_plan import trim_drafts


class Batcher:
    def __init__(
        self,
        config: EngineConfig,
        cache: KVCache,
        counts: dict[str, int],
        out_of_kv: Callable[[int], None],
    ) -> None:
        self.config = config
        self.cache = cache
        self.counts = counts
        self.out_of_kv = out_of_kv  # finishes the lone request at this slot ("length")
        self.batch = RunningBatch(cache)
        self.parked = ParkedStore()
        self.waiting: deque[EngineRequest] = deque()
        self._clock = 0

    def kv_tokens_used(self) -> int:
        return self.batch.reserved + self.parked.num_tokens

    def note_peak(self, extra: int = 0) -> None:
        used = self.kv_tokens_used() + extra
        self.counts["kv_tokens_peak"] = max(self.counts["kv_tokens_peak"], used)

    def admit(self) -> None:
        budget = self.config.kv_budget_tokens
        while self.waiting and len(self.batch) < self.config.max_batch:
            state = self.waiting[0]
            entry = self.parked.get(state.request_id)
            reuse = entry.reusable(state.tokens) if entry is not None else 0
            is_decode = 0 < reuse == len(state.tokens) - 1
            reserve = reuse if is_decode else len(state.tokens)
            # its KV, and room for this step's growth: one token per decoding row, its own
            # included (running rows first, as vLLM schedules; admitted without that room,
            # make_room would preempt it again at once, dropping the KV it resumed with)
            grow = self.batch.num_decode + is_decode if self.batch.rows else 0
            extra = reserve - (entry.kv.num_tokens if entry is not None else 0) + grow
            if self.kv_tokens_used() + extra > budget:
                # the queue's order only when something must go (listing a long queue for
                # every admission made admitting N requests O(N^2))
                queue = self._queue()
                evict = self.parked.evict
                while self.kv_tokens_used() + extra > budget and evict(state.request_id, queue):
                    self.counts["num_parked_evictions"] += 1
                if self.kv_tokens_used() + extra > budget:
                    return  # head of line waits for KV
            self.waiting.popleft()
            self._place(state, entry, reuse, is_decode, reserve)

    def _queue(self) -> list[str]:
        """The waiting requests in order, as ``ParkedStore.evict`` weighs them ("lru":
        none, so the least recently used goes)."""
        if self.config.parked_eviction == "lru":
            return []
        return [s.request_id for s in self.waiting]

    def _place(
        self,
        state: EngineRequest,
        entry: ParkedEntry | None,
        reuse: int,
        is_decode: bool,
        reserve: int,
    ) -> None:
        self.parked.pop(state.request_id)
        slot = self.batch.add_decode(state) if is_decode else self.batch.add_prefill(state)
        if entry is not None and reuse > 0:
            self.cache.restore(slot, entry.kv, reuse)
            self.counts["num_parked_hits"] += 1
        state.cache_len, state.reserved, state.num_cached_tokens = reuse, reserve, reuse
        state.admitted_at = self._clock
        self._clock += 1
        if not is_decode and state.request.generated_ids and not state.is_recompute:
            self.counts["num_reprefills"] += 1
            state.is_reprefill = True
        self.note_peak()

    def make_room(self, trees: dict[str, DraftTree]) -> dict[str, DraftTree]:
        """Evict parked KV, then trim drafts, then preempt until the decode step fits."""
        budget = self.config.kv_budget_tokens
        while True:
            need = sum(
                1 + (trees[r.request_id].num_nodes if r.request_id in trees else 0)
                for r in self.batch.decoding
            )
            over = self.kv_tokens_used() + need - budget
            if over <= 0:
                self.note_peak(need)
                return trees
            if self.parked.evict(None, self._queue()):
                self.counts["num_parked_evictions"] += 1
            elif trees:
                trees = trim_drafts(trees, over)
            else:
                self._preempt()

    def _preempt(self) -> None:
        victim = max(self.batch.rows, key=lambda r: r.admitted_at)
        slot = self.batch.slot_of(victim)
        if len(self.batch) == 1:  # alone and out of KV: it cannot grow any further
            self.out_of_kv(slot)
            return
        self.batch.remove(slot)
        victim.phase, victim.cache_len, victim.reserved = Phase.WAITING, 0, 0
        victim.is_recompute = True
        self.waiting.appendleft(victim)
        self.counts["num_preemptions"] += 1
