"""SimInstance: one generator instance's batch and KV books, advanced many steps at a time.

The rules are the built-in engine's (``actors.generator.builtin.batcher``), step for step
(``tests/sim/test_engine_conformance.py`` runs both on the same workloads): a FIFO waiting
queue (preempted requests go back to its front); admission into a free batch slot while the
request's KV and the coming step's growth fit the budget, evicting parked KV
least-recently-used (never the request's own), reusing its parked KV when it comes back to
the same instance; chunked prefill (``max_prefill_tokens`` a step, first-admitted first);
before each step, room for the step's growth (one token per decoding row) is made by
evicting parked KV, then dropping drafts, then preempting the most recently admitted
request (its KV dropped, recomputed when re-admitted); a request alone and out of KV ends
("length"). The books count KV as the engine does: a prefilling request reserves its whole
context, a decoding one all but its last sampled token (written by the next step), parked
KV likewise. Chunks that end in the same step are parked in admission order.
With ``kv_pool="global"`` (Seer's Mooncake pool) a chunk's KV leaves the instance when the
chunk ends and comes back on any instance without a prefill; ``"local"`` parks it here.
The Batcher itself owns tensors, so these rules are re-stated over token counts, not shared.

Speed: instead of one event per decode step, ``plan`` computes how many steps can run with
the batch unchanged (until the first chunk ends, KV runs out, or ``max_steps``), prices
them with the cost model at the stretch's mid-point context, and ``finish`` applies them
at once; ``cut`` shortens a stretch when new work arrives (the step in flight completes).
A request makes ``rate`` tokens per step (1, plus the accepted drafts expected).
Outside the engine: ``step_overhead_s`` is added to every step and ``report_s`` per ended
chunk before the next stretch (the live generator's loop: thread hand-off, admission,
reporting results; measured from live step logs, see ``pipeline.sim.steplog``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from actors.generator.builtin.config import PARKED_EVICTIONS
from pipeline.sim.costmodel import CostModel

__all__ = ["Chunk", "SimInstance"]

KvPool = Literal["local", "global"]


@dataclass(slots=True, eq=False)
class Chunk:
    """One dispatched chunk of one request, as the instance sees it."""

    request: int  # index of the request in the simulation
    chunk_seq: int
    ctx: float  # tokens of context (prompt + generated), growing as it decodes
    target: float  # tokens this chunk will generate (budget or the true end, if sooner)
    finishes: bool  # reaching `target` ends the request (its true length)
    dispatched_s: float
    new_ctx: bool = True  # no KV for it anywhere yet (its first chunk)
    sampled: bool = False  # decoding: its last token is sampled, its KV not yet written
    done: float = 0.0
    rate: float = 1.0  # tokens per step (1 + expected accepted drafts)
    draft: int = 0  # draft tokens per step
    admitted_at: int = 0
    start_s: float = -1.0
    reprefilled: int = 0
    out_of_kv: bool = False
    pending_prefill: int = 0  # admitted, its prefill not run yet
    num_steps: float = 0.0  # decode steps it took part in
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    ended_s: float = 0.0  # when its engine finished it


class SimInstance:
    def __init__(
        self,
        index: int,
        cost: CostModel,
        *,
        max_batch: int,
        kv_capacity: int,
        kv_pool: KvPool = "local",
        max_steps: int = 256,
        max_prefill_tokens: int = 1 << 30,
        step_overhead_s: float = 0.0,
        report_s: float = 0.0,
        pace: Sequence[tuple[float, float]] = (),
        parked_eviction: str = "queue",
    ) -> None:
        if min(max_batch, kv_capacity, max_steps, max_prefill_tokens) < 1:
            raise ValueError(
                "max_batch, kv_capacity, max_steps and max_prefill_tokens must be >= 1"
            )
        if parked_eviction not in PARKED_EVICTIONS:
            raise ValueError(
                f"parked_eviction must be one of {PARKED_EVICTIONS}, got {parked_eviction!r}"
            )
        self.parked_eviction = parked_eviction
        if kv_pool not in ("local", "global"):
            raise ValueError(f"kv_pool must be 'local' or 'global', got {kv_pool!r}")
        self.index = index
        self.cost = cost
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity
        self.kv_pool = kv_pool
        self.max_steps = max_steps
        self.max_prefill_tokens = max_prefill_tokens
        # the live generator's time outside engine steps: per step (the hand-off to the
        # worker thread and back, admitting queued chunks) and per chunk it reports
        self.step_overhead_s = step_overhead_s
        self.report_s = report_s
        # (from s, factor) sorted by time: a stretch planned at ``now`` runs its engine
        # steps at the factor of the last entry at or before ``now`` times the table's
        # price (1.0 before the first): a machine whose speed varies over the rollout
        if any(not f > 0 for _, f in pace) or any(
            a[0] >= b[0] for a, b in itertools.pairwise(pace)
        ):
            raise ValueError("pace: factors must be > 0 and times strictly increasing")
        self._pace_at = [t for t, _ in pace]
        self._pace = [f for _, f in pace]
        self._reports_due = 0.0  # reporting the chunks that just ended delays the next step
        self.waiting: deque[Chunk] = deque()
        self.running: list[Chunk] = []
        self.parked: OrderedDict[int, float] = OrderedDict()  # request -> KV tokens (LRU)
        self.counts = {
            "num_preemptions": 0,
            "num_recomputed_tokens": 0,
            "num_reprefilled_tokens": 0,
            "num_parked_evictions": 0,
            "num_steps": 0,
            "num_draft_tokens": 0,
            "num_accepted_tokens": 0,
        }
        self.busy_s = 0.0
        self.engine_s = 0.0  # of which inside engine steps (the rest: overhead, reports)
        self._seg_engine = (0.0, 0.0)  # the stretch's prefill and decode step, engine only
        self._clock = 0
        self._recompute: set[int] = set()  # requests preempted: their next admission recomputes
        # the current stretch
        self.seg_start = 0.0
        self.seg_prefill = 0.0
        self.seg_dt = 0.0
        self.seg_steps = 0
        self.seg_end: float | None = None  # None: idle
        self.version = 0
        # called with the instance after admission, before a stretch is priced (the
        # simulator sets each running chunk's draft length and token rate there)
        self.on_batch: Callable[[SimInstance], None] | None = None
        self.one_step = False  # set by on_batch: the next stretch is a single step

    # --- books -----------------------------------------------------------------------
    @staticmethod
    def kv_of(c: Chunk) -> float:
        """A running chunk's KV tokens as the engine books them: a prefilling row reserves
        its whole context, a decoding row holds all but its last sampled token."""
        return c.ctx - 1.0 if c.sampled else c.ctx

    def kv_used(self) -> float:
        return sum(self.kv_of(c) for c in self.running) + sum(self.parked.values())

    def kv_used_at(self, now: float) -> float:
        """KV in use at ``now``, counting the steps of the current stretch already run (the
        books are applied at the stretch's end; a live engine reports its KV as of now)."""
        used = self.kv_used()
        if self.seg_end is None or self.seg_dt <= 0:
            return used
        into = now - self.seg_start - self.seg_prefill
        steps = min(self.seg_steps, max(0, math.floor(into / self.seg_dt + 1e-9)))
        return used + sum(
            min(steps * c.rate, c.target - c.done) for c in self.running if not c.pending_prefill
        )

    def enqueue(self, chunk: Chunk) -> None:
        self.waiting.append(chunk)

    def _admit(self) -> None:
        """Move waiting chunks into free slots while their KV fits (the engine's rule)."""
        while self.waiting and len(self.running) < self.max_batch:
            head = self.waiting[0]
            own = self.parked.get(head.request, 0.0)
            # its own parked KV covers all but the last token: it decodes at once
            resume = own >= head.ctx - 1.5 or (
                self.kv_pool == "global"
                and not head.new_ctx
                and head.request not in self._recompute  # the pool hands the KV over
            )
            reserve = head.ctx - 1.0 if resume else head.ctx
            # and room for this step's growth, one token per decoding row (its own included)
            grow = sum(c.sampled for c in self.running) + resume if self.running else 0
            extra = reserve - own + grow
            used = self.kv_used()
            while used + extra > self.kv_capacity and self._evict(head.request):
                used = self.kv_used()
            if used + extra > self.kv_capacity and self.running:
                return  # head of line waits for KV
            self.waiting.popleft()
            self.parked.pop(head.request, None)
            head.sampled = resume
            # a prefix of its own parked KV is reused (the engine matches the tokens)
            head.pending_prefill = 0 if resume else round(head.ctx - own)
            head.admitted_at = self._clock
            self._clock += 1
            self.running.append(head)

    def _prefill(self) -> tuple[int, int]:
        """One step's prefill, as the engine's chunked prefill runs it: up to
        ``max_prefill_tokens`` over the prefilling chunks in admission order (a chunk whose
        prefill completes samples its first token this step; the others wait for the next).
        Returns the tokens prefilled and how many chunks they belong to."""
        total = segments = 0
        budget = self.max_prefill_tokens
        for c in self.running:
            if c.pending_prefill <= 0:
                continue
            if budget <= 0:
                break
            n = min(c.pending_prefill, budget)
            c.pending_prefill -= n
            budget -= n
            total += n
            segments += 1
            if c.request in self._recompute:
                self.counts["num_recomputed_tokens"] += n
            elif not c.new_ctx:
                self.counts["num_reprefilled_tokens"] += n
                c.reprefilled += n
            if not c.pending_prefill:
                self._recompute.discard(c.request)
        return total, segments

    def _evict(self, keep: int) -> bool:
        """Evict one parked KV other than ``keep``'s, as the engine does
        (``ParkedStore.evict``): the least recently parked of the requests not waiting,
        then the waiting request that runs last ("lru": the least recently parked)."""
        queue = self.parked_eviction == "queue"
        waiting = {c.request for c in self.waiting} if queue else set()
        victim = next((r for r in self.parked if r != keep and r not in waiting), None)
        if victim is None and queue:
            victim = next(
                (
                    c.request
                    for c in reversed(self.waiting)
                    if c.request != keep and c.request in self.parked
                ),
                None,
            )
        if victim is None:
            return False
        del self.parked[victim]
        self.counts["num_parked_evictions"] += 1
        return True

    def _make_room(self) -> None:
        """Evict parked KV, then preempt the newest admission, until one step fits: each
        decoding row writes its last token (drafts are dropped first, in ``plan``)."""
        while True:
            need = sum(c.sampled for c in self.running)
            if self.kv_used() + need <= self.kv_capacity or not self.running:
                return
            if self._evict(-1):
                continue
            if len(self.running) == 1:
                self.running[0].out_of_kv = True  # alone and out of KV: it ends here
                return
            victim = max(self.running, key=lambda c: c.admitted_at)
            self.running.remove(victim)
            victim.pending_prefill = 0
            victim.sampled = False
            self._recompute.add(victim.request)
            self.waiting.appendleft(victim)
            self.counts["num_preemptions"] += 1

    # --- stretches of decode steps ------------------------------------------------------
    def pace(self, now: float) -> float:
        """The factor on the table's price of engine steps planned at ``now``."""
        i = bisect.bisect_right(self._pace_at, now)
        return self._pace[i - 1] if i else 1.0

    def plan(self, now: float) -> float | None:
        """Admit, make room, and plan the next stretch from ``now``; its end (None: idle)."""
        self.version += 1
        self._admit()
        self._make_room()
        prefill_tokens, prefill_segments = self._prefill()
        if not self.running:
            self.seg_end = None
            self._reports_due = 0.0  # reported while idle
            return None
        for c in self.running:
            if c.start_s < 0:
                c.start_s = now
        if self.on_batch is not None:
            self.on_batch(self)
        # chunks still prefilling make no token this step (and draft nothing)
        prefilling = [c for c in self.running if c.pending_prefill > 0]
        for c in prefilling:
            c.draft = 0
        ended = [c for c in self.running if c.out_of_kv]
        # the first step writes the decoding rows' last tokens; later ones every row's
        writes = sum(c.sampled for c in self.running)
        free = self.kv_capacity - self.kv_used() - writes
        drafts = sum(c.draft for c in self.running)
        if drafts > free:  # drafts that do not fit are dropped (the engine trims them)
            for c in self.running:
                c.draft, c.rate = 0, 1.0
            drafts = 0
        growth = sum(c.rate for c in self.running if not c.pending_prefill)
        if ended:
            steps = 0
        elif prefilling:  # the next step changes the batch
            steps = 1
        else:
            by_kv = 1 + max(0, math.floor((free - drafts) / growth))
            by_chunk = min(
                max(1, math.ceil((c.target - c.done) / c.rate - 1e-9)) for c in self.running
            )
            steps = max(1, min(by_kv, by_chunk, 1 if self.one_step else self.max_steps))
        self.one_step = False
        batch = len(self.running)
        # the stretch's middle: each row grows by its rate a step
        ctx = self.cost.batch_context([c.ctx for c in self.running]) + steps * growth / batch / 2
        self.seg_start = now
        pace = self.pace(now)
        self.seg_prefill = pace * self.cost.prefill_s(prefill_tokens, prefill_segments)
        decode = pace * self.cost.decode_s(
            batch, ctx, self.cost.batch_draft([c.draft for c in self.running])
        )
        decoders = [c for c in self.running if c.sampled]
        if steps and len(decoders) < batch:
            # the first step's decode forward is the rows already decoding; the others join
            # it once prefilled (priced apart, as the step log's teacher-forced check does)
            first_s = 0.0
            if decoders:
                first_s = pace * self.cost.decode_s(
                    len(decoders),
                    self.cost.batch_context([c.ctx for c in decoders]),
                    self.cost.batch_draft([c.draft for c in decoders]),
                )
            self.seg_prefill += first_s - decode
        self._seg_engine = (self.seg_prefill, decode)
        self.seg_prefill += self._reports_due
        self._reports_due = 0.0
        if ended:  # the engine spends a step (no forward) ending the request
            self.seg_prefill += self.step_overhead_s
            self.counts["num_steps"] += 1
        step = self._seg_engine[1] + self.step_overhead_s
        self.seg_dt = step if steps else 0.0
        self.seg_steps = steps
        self.seg_end = now + self.seg_prefill + steps * self.seg_dt
        return self.seg_end

    def cut(self, now: float) -> float | None:
        """New work arrived at ``now``: end the stretch after the step in flight."""
        if self.seg_end is None or self.seg_end <= now:
            return self.seg_end
        into = now - self.seg_start - self.seg_prefill
        steps = 0 if into <= 0 else min(self.seg_steps, math.ceil(into / self.seg_dt - 1e-12))
        if steps < self.seg_steps:
            self.version += 1
            self.seg_steps = steps
            self.seg_end = self.seg_start + self.seg_prefill + steps * self.seg_dt
        return self.seg_end

    def finish(self) -> list[Chunk]:
        """Apply the planned stretch; the chunks that ended (their KV parked or freed)."""
        steps = self.seg_steps
        assert self.seg_end is not None
        self.busy_s += self.seg_end - self.seg_start
        self.engine_s += self._seg_engine[0] + steps * self._seg_engine[1]
        self.counts["num_steps"] += steps
        out: list[Chunk] = []
        keep: list[Chunk] = []
        for c in self.running:
            if c.pending_prefill:  # still prefilling: no token yet
                keep.append(c)
                continue
            made = min(steps * c.rate, c.target - c.done)
            took = made / c.rate if c.rate > 0 else 0.0  # the last step may end early
            c.done += made
            c.ctx += made
            c.sampled = c.sampled or steps > 0
            c.num_steps += took
            if c.draft:
                c.num_draft_tokens += took * c.draft
                c.num_accepted_tokens += made - took
                self.counts["num_draft_tokens"] += round(took * c.draft)
                self.counts["num_accepted_tokens"] += round(made - took)
            if c.done >= c.target - 1e-6 or c.out_of_kv:
                out.append(c)
                ends = c.out_of_kv or (c.finishes and c.done >= c.target - 1e-6)
                if self.kv_pool == "local" and not ends:
                    self.parked[c.request] = self.kv_of(c)
            else:
                keep.append(c)
        self.running = keep
        self.seg_end = None
        self._reports_due += len(out) * self.report_s
        return out
