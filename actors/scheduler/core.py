"""SchedulerCore: the request buffer and the dispatch decisions, synchronous and pure.

Consumes: requests (``add``), generator telemetry (``update_load``), group length estimates
(``update_estimate``), chunk results (``on_chunk_finished``), chunks that will not finish
(``requeue_chunk``) and generator failures (``requeue_instance``); for multi-turn episodes,
a request between turns (``hold``: at its environment, its KV still parked where it ran)
and its observation tokens (``resume``: back to waiting, sticky to that generator) or its
end there (``finish_held``). Emits: ``Dispatch``
decisions from ``next_dispatches(now)`` -- as many as capacity allows, in the policy's
order, each placed by ``select_instance``.

Guarantees:
- A request is dispatched only from the waiting buffer, so never twice at once; a result is
  accepted only for the request's current chunk (same ``chunk_seq`` and instance, still
  running); anything else is "stale": ignored and counted. Unknown ids raise
  ``UnknownRequestError``. Progress is committed per finished chunk, so a generator failure
  loses only the uncommitted chunk.
- Capacity (policies with ``bounded_by_capacity``): at most ``max_running_per_instance``
  in-flight chunks per instance, and projected KV (last telemetry + prompt + generated +
  max_chunk_tokens of each chunk dispatched since) under
  ``kv_high_watermark * kv_tokens_total`` -- except that an idle instance always takes one
  chunk, so the rollout cannot stall on KV.
- Chunks: ``min(chunk_size, remaining)`` for chunked policies, all of ``remaining`` otherwise,
  and never past the request's turn (``RequestState.turn_left``).
- Requests a policy cannot place now are skipped, not waited on (work-conserving), so pinned
  or KV-heavy requests never block others.
- Cost: with a ``ranked`` policy that capacity bounds, the waiting buffer is kept sorted by
  KV home (``WaitingIndex``) and a dispatch decision looks at the first placeable request of
  each home, not at every waiting request: its cost does not grow with the requests in
  flight. Other policies (and ``indexed=False``, the reference) sort and scan the buffer;
  both make the same decisions.

It does not talk to generators, keep time, or retry: the actor shell does that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from actors.scheduler.placement import need_on, select_instance
from actors.scheduler.policy import Policy
from actors.scheduler.state import (
    Dispatch,
    InstanceLoad,
    ProjectedLoad,
    RequestState,
    UnknownRequestError,
)
from actors.scheduler.waiting import Key, WaitingIndex

__all__ = ["COUNTER_NAMES", "SchedulerCore", "UnknownRequestError"]

COUNTER_NAMES = ("dispatches", "chunks_moved", "stale_results", "starvation_picks")


def _require(ok: bool, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"SchedulerCore needs {rule}, got {value!r}")


@dataclass(slots=True)
class _Flight:
    instance: int
    max_chunk_tokens: int
    kv_need: int
    telemetry: int  # how many load reports its instance had sent when it was dispatched


class SchedulerCore:
    def __init__(
        self,
        policy: Policy,
        num_instances: int,
        *,
        chunk_size: int,
        max_running_per_instance: int,
        kv_high_watermark: float = 0.9,
        affinity_spread: int = 4,
        growth_reserve: int | None = None,
        indexed: bool = True,
        global_kv: bool = False,
        sticky_turns: bool = True,
    ) -> None:
        _require(num_instances >= 1, "num_instances >= 1", num_instances)
        _require(chunk_size >= 1, "chunk_size >= 1", chunk_size)
        _require(
            max_running_per_instance >= 1, "max_running_per_instance >= 1", max_running_per_instance
        )
        _require(0.0 < kv_high_watermark <= 1.0, "0 < kv_high_watermark <= 1", kv_high_watermark)
        _require(affinity_spread >= 0, "affinity_spread >= 0", affinity_spread)
        self.policy = policy
        self.num_instances = num_instances
        self.chunk_size = chunk_size
        # KV kept free per working-set member for its growth (default: a quarter chunk;
        # a full chunk each starves the batch, none at all makes the engine evict)
        self.growth_reserve = chunk_size // 4 if growth_reserve is None else growth_reserve
        self.max_running_per_instance = max_running_per_instance
        self.kv_high_watermark = kv_high_watermark
        self.affinity_spread = affinity_spread
        # a global KV pool (Seer's): a chunk's KV leaves its instance when the chunk ends,
        # so a waiting request has no home and any instance serves its next chunk alike
        self.global_kv = global_kv
        # False: a resumed turn is placed as a fresh request (no KV home, no pin), as an
        # agent loop over a plain server submits it (`seer bench agentic`'s baseline)
        self.sticky_turns = sticky_turns
        self._fresh_turns: set[str] = set()
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        self._requests: dict[str, RequestState] = {}
        self._waiting: dict[str, RequestState] = {}
        self._flights: dict[str, _Flight] = {}
        self._running_on: list[set[str]] = [set() for _ in range(num_instances)]
        # requests started and not finished whose context lives on each instance (running
        # there or parked there): without a global KV pool this is the working set, capped
        # at max_running_per_instance so parked KV is not evicted by newcomers
        self._home_of: dict[str, int] = {}
        self._homed: list[int] = [0] * num_instances
        self._homed_kv: list[int] = [0] * num_instances  # their context tokens
        self._loads = [
            ProjectedLoad(index=i, max_running=max_running_per_instance)
            for i in range(num_instances)
        ]
        # load reports per instance: a chunk dispatched since the last one is not yet in it
        # (a counter, so that a report does not touch every chunk in flight there)
        self._telemetry = [0] * num_instances
        self._down: set[int] = set()
        self._num_finished = 0
        # per request (not a probe), the policy's estimate of its group's output length when
        # its first chunk was dispatched: what ordered it (``RequestRecord.estimate``)
        self.first_estimates: dict[str, int] = {}
        # dispatches left before the next anti-starvation promotion is allowed
        self._until_promotion = 0
        use_index = indexed and policy.ranked and policy.bounded_by_capacity
        self._index = WaitingIndex(policy) if use_index else None

    def add(self, requests: Sequence[RequestState], now: float) -> None:
        """New requests enter the waiting buffer (duplicate ids raise ``ValueError``)."""
        seen: set[str] = set()
        for r in requests:
            if r.request_id in self._requests or r.request_id in seen:
                raise ValueError(f"duplicate request id {r.request_id!r}")
            seen.add(r.request_id)
            if r.status != "waiting" or not 0 <= r.generated < r.max_new_tokens:
                raise ValueError(
                    f"request {r.request_id!r} must be waiting with 0 <= generated < "
                    f"max_new_tokens, got {r.status}, {r.generated}/{r.max_new_tokens}"
                )
        ordered = sorted(requests, key=lambda r: r.arrival)
        for r in ordered:  # first, so that a policy refusing a request leaves the core as is
            self.policy.add(r)
        for r in ordered:
            r.enqueued_at, r.instance = now, None
            self._requests[r.request_id] = r
            self._waiting[r.request_id] = r
            if self._index is not None:
                self._index.insert(r, None)

    def update_load(self, load: InstanceLoad) -> None:
        """Fresh telemetry replaces the projection; it also marks the instance as up."""
        proj = self._loads[self._check_instance(load.index)]
        proj.kv_tokens_used, proj.kv_tokens_total = load.kv_tokens_used, load.kv_tokens_total
        self._telemetry[load.index] += 1
        self._down.discard(load.index)

    def update_estimate(self, group_id: str, estimate: int) -> None:
        self.policy.update_estimate(group_id, estimate)
        if self._index is not None:
            self._index.rerank_group(group_id)

    def chunk_allowance(self, request_id: str, instance: int, chunk_seq: int) -> int | None:
        """How many new tokens the chunk `chunk_seq` of `request_id` on `instance` may
        report; None when that chunk is not the one running (a stale result)."""
        req = self.request(request_id)
        flight = self._flights.get(request_id)
        if flight is None or req.chunk_seq != chunk_seq or req.instance != instance:
            return None
        return flight.max_chunk_tokens

    def on_chunk_finished(
        self,
        request_id: str,
        instance: int,
        chunk_seq: int,
        num_new_tokens: int,
        finished: bool,
        now: float,
    ) -> Literal["ok", "stale"]:
        """Commit a chunk's progress; a request not finished goes back to waiting."""
        req, flight = self.request(request_id), self._running_chunk(request_id, instance, chunk_seq)
        if flight is None:
            return "stale"
        if not 0 <= num_new_tokens <= flight.max_chunk_tokens:
            raise ValueError(
                f"chunk of {request_id!r} reports {num_new_tokens} new tokens, "
                f"allowed 0..{flight.max_chunk_tokens}"
            )
        self._land(request_id)
        req.generated += num_new_tokens
        req.turn_generated += num_new_tokens
        home = self._home_of.get(request_id)
        if home is not None:
            self._homed_kv[home] += num_new_tokens
        req.instance = None
        if finished or req.generated >= req.max_new_tokens:
            req.status, req.kv_instance = "finished", None
            self._num_finished += 1
            self._set_home(request_id, None)
        elif self.global_kv:
            self._set_home(request_id, None)
            self._to_waiting(req, now, kv_instance=None)
        else:
            self._to_waiting(req, now, kv_instance=instance)
        return "ok"

    def requeue_chunk(
        self, request_id: str, instance: int, chunk_seq: int, now: float
    ) -> Literal["ok", "stale"]:
        """Chunk `chunk_seq` of `request_id` on `instance` will not finish (aborted by its
        engine, or its result is overdue): the request goes back to waiting from its last
        committed progress, with no KV home. "stale" when that chunk is not the one running."""
        req = self.request(request_id)
        if self._running_chunk(request_id, instance, chunk_seq) is None:
            return "stale"
        self._land(request_id)
        self._set_home(request_id, None)
        self._to_waiting(req, now, kv_instance=None)
        return "ok"

    def hold(self, request_id: str) -> None:
        """A waiting request leaves the buffer for its environment (an episode between
        turns, or before its first): not dispatched until ``resume`` or ``finish_held``.
        Its KV home stays (the KV is parked there), so it keeps its working-set place."""
        req = self.request(request_id)
        if req.status != "waiting":
            raise ValueError(f"request {request_id!r} is {req.status}, not waiting: cannot hold")
        del self._waiting[request_id]
        if self._index is not None:
            self._index.remove(req)
        self.policy.remove(req)
        req.status = "environment"

    def resume(self, request_id: str, num_observation_tokens: int, now: float) -> None:
        """A held request's observation tokens joined its context: it waits again, from a
        new turn, for the generator that holds its KV (unless the spread moves it)."""
        req = self.request(request_id)
        if req.status != "environment":
            raise ValueError(f"request {request_id!r} is {req.status}, not held: cannot resume")
        if not 0 <= num_observation_tokens < req.remaining:
            raise ValueError(
                f"request {request_id!r}: {num_observation_tokens} observation tokens leave "
                f"nothing of its {req.remaining} tokens left"
            )
        req.generated += num_observation_tokens
        req.turn_generated = 0
        if not self.sticky_turns:
            self._set_home(request_id, None)
            self._fresh_turns.add(request_id)
        home = self._home_of.get(request_id)
        if home is not None:
            self._homed_kv[home] += num_observation_tokens
        self._to_waiting(req, now, kv_instance=home)

    def finish_held(self, request_id: str) -> None:
        """A held request's episode ended at its environment."""
        req = self.request(request_id)
        if req.status != "environment":
            raise ValueError(f"request {request_id!r} is {req.status}, not held: cannot finish")
        req.status, req.kv_instance = "finished", None
        self._num_finished += 1
        self._set_home(request_id, None)

    def _running_chunk(self, request_id: str, instance: int, chunk_seq: int) -> _Flight | None:
        """The flight of chunk `chunk_seq` of `request_id` on `instance` when that chunk is
        the one running; else None, counted as a stale result."""
        req = self.request(request_id)
        flight = self._flights.get(request_id)
        if (
            flight is None
            or req.status != "running"
            or (req.chunk_seq, req.instance)
            != (
                chunk_seq,
                instance,
            )
        ):
            self.counters["stale_results"] += 1
            return None
        return flight

    def requeue_instance(self, instance: int, now: float, *, mark_down: bool = False) -> list[str]:
        """A generator died: its running requests return to waiting, its KV is gone.

        Returns the ids re-queued (they resume from their last committed progress).
        ``mark_down`` also stops dispatching to it until its next ``update_load``.
        """
        self._check_instance(instance)
        ids = sorted(self._running_on[instance], key=lambda rid: self._requests[rid].arrival)
        for rid in ids:
            self._land(rid)
            self._to_waiting(self._requests[rid], now, kv_instance=None)
        for req in self._waiting.values():
            if req.kv_instance == instance:
                req.kv_instance = None
        for rid, home in list(self._home_of.items()):
            if home == instance:  # its KV died with the instance
                self._set_home(rid, None)
        proj = self._loads[instance]
        proj.num_running, proj.kv_tokens_used = 0, 0
        if mark_down:
            self._down.add(instance)
        return ids

    def next_dispatches(self, now: float) -> list[Dispatch]:
        """Dispatch waiting requests in the policy's order while capacity allows."""
        if not self._waiting:
            return []
        if self._index is None:
            return self._dispatch_by_scan(now)
        self._index.refresh(now)
        out: list[Dispatch] = []
        cursor: Key = ()  # before every key: each pass goes on from the last dispatch
        while self._has_free_slot():
            found = self._next_placeable(cursor)
            if found is None:
                break
            cursor, req = found
            self._try_dispatch(req, True, now, out, promoted=cursor[0] == 0)
        return out

    def _dispatch_by_scan(self, now: float) -> list[Dispatch]:
        """The plain way: sort every waiting request, try each in turn."""
        out: list[Dispatch] = []
        bounded = self.policy.bounded_by_capacity
        waiting = list(self._waiting.values())
        starved = [(True, r) for r in self.policy.starved(waiting, now)]
        for promoted, req in starved + [(False, r) for r in self.policy.order(waiting, now)]:
            if bounded and not self._has_free_slot():
                break
            if self._waiting.get(req.request_id) is not req:
                continue  # dispatched already (a promotion), or not waiting (defensive)
            if promoted and self._until_promotion > 0:
                continue  # one promotion per `starvation_every` dispatches
            self._try_dispatch(req, bounded, now, out, promoted=promoted)
        return out

    def _try_dispatch(
        self, req: RequestState, bounded: bool, now: float, out: list[Dispatch], *, promoted: bool
    ) -> None:
        left = req.turn_left
        max_chunk_tokens = min(self.chunk_size, left) if self.policy.chunked else left
        kv_need = req.prompt_len + req.generated + max_chunk_tokens
        instance = self._place(req, kv_need, bounded)
        if instance is not None:
            kv_need = need_on(req, instance, kv_need, req.prompt_len + req.generated)
            out.append(self._dispatch(req, instance, max_chunk_tokens, kv_need, promoted))

    def _next_placeable(self, cursor: Key) -> tuple[Key, RequestState] | None:
        """The first waiting request after `cursor` in the policy's order that `_place` would
        place now (the same test, per home: the scan's next dispatch), with its key."""
        assert self._index is not None
        admitting = [
            p
            for p in self._loads
            if p.index not in self._down
            and p.num_running < p.max_running
            and self._homed[p.index] < p.max_running
        ]
        least = min((p.num_running for p in admitting), default=None)
        best: tuple[Key, RequestState] | None = None
        for home in self._index.homes():
            candidates = admitting
            if home is not None and home not in self._down:
                h = self._loads[home]
                if h.num_running < h.max_running:
                    candidates = []  # its home has a slot: any of its requests runs
                elif least is None or h.num_running - least <= self.affinity_spread:
                    continue  # its home is full and no move is allowed
                else:
                    spread = self.affinity_spread
                    candidates = [p for p in admitting if h.num_running - p.num_running > spread]
            elif not admitting:
                continue
            accept = None
            if candidates and all(self._homed[p.index] for p in candidates):
                accept = self._admitted_by(candidates)
            found = self._index.first_after(
                home, cursor, accept, best[0] if best else None, promote=self._until_promotion <= 0
            )
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        return best

    def _admitted_by(self, candidates: list[ProjectedLoad]) -> Callable[[RequestState], bool]:
        """`_admits` by any candidate: a bound on the request's context, computed once (a
        scan may test hundreds of waiting requests that do not fit)."""
        limit = max(self._context_limit(p) for p in candidates)
        return lambda req: req.prompt_len + req.generated <= limit

    def _set_home(self, request_id: str, instance: int | None) -> None:
        context = self._requests[request_id].prompt_len + self._requests[request_id].generated
        old = self._home_of.pop(request_id, None)
        if old is not None:
            self._homed[old] -= 1
            self._homed_kv[old] -= context
        if instance is not None:
            self._home_of[request_id] = instance
            self._homed[instance] += 1
            self._homed_kv[instance] += context
        if self._index is not None and request_id in self._waiting:
            self._index.rehome(self._requests[request_id], instance)

    def working_set(self, instance: int) -> tuple[int, int]:
        """(requests started and unfinished whose KV lives on `instance`, their context tokens)."""
        return self._homed[instance], self._homed_kv[instance]

    def _admits(self, load: ProjectedLoad, req: RequestState) -> bool:
        """Can `load`'s instance take `req` into its working set? It needs a free place, and
        the contexts it holds plus `growth_reserve` tokens for each must fit the KV watermark
        (an empty working set always takes one request)."""
        return req.prompt_len + req.generated <= self._context_limit(load)

    def _context_limit(self, load: ProjectedLoad) -> float:
        """The largest context `load`'s instance admits into its working set now."""
        i = load.index
        if self._homed[i] == 0:
            return math.inf
        if self._homed[i] >= load.max_running:
            return -math.inf
        room = self.kv_high_watermark * load.kv_tokens_total - self._homed_kv[i]
        return room - (self._homed[i] + 1) * self.growth_reserve

    def _place(self, req: RequestState, kv_need: int, bounded: bool) -> int | None:
        pin = None if req.request_id in self._fresh_turns else self.policy.pin(req)
        if not bounded or pin is not None:
            candidates = [p for p in self._loads if p.index not in self._down]
            if pin is not None and pin not in self._down:
                candidates = [self._loads[self._check_instance(pin)]]
            return select_instance(req, candidates, self.affinity_spread, check_capacity=bounded)
        live = [p for p in self._loads if p.index not in self._down]
        open_ = [p for p in live if p.num_running < p.max_running]
        home = self._home_of.get(req.request_id)
        if home is not None and home not in self._down:
            h = self._loads[home]
            movable = [p for p in open_ if p.index != home and self._admits(p, req)]
            least = min(movable, key=self._load_key, default=None)
            if least is not None and h.num_running - least.num_running > self.affinity_spread:
                return least.index  # load imbalance past the spread: move (re-prefill)
            return home if h.num_running < h.max_running else None  # its KV is there: wait
        fits = [p for p in open_ if self._admits(p, req)]
        return min(fits, key=self._load_key).index if fits else None

    def _load_key(self, load: ProjectedLoad) -> tuple[int, float, int]:
        kv_tokens_total = max(load.kv_tokens_total, 1)
        return (load.num_running, self._homed_kv[load.index] / kv_tokens_total, load.index)

    def _dispatch(
        self, req: RequestState, instance: int, max_chunk_tokens: int, kv_need: int, promoted: bool
    ) -> Dispatch:
        self._fresh_turns.discard(req.request_id)
        self._until_promotion -= 1
        if promoted:
            self.counters["starvation_picks"] += 1
            self._until_promotion = self.policy.starvation_every - 1
        if req.kv_instance is not None and req.kv_instance != instance:
            self.counters["chunks_moved"] += 1
        self.counters["dispatches"] += 1
        del self._waiting[req.request_id]
        if self._index is not None:
            self._index.remove(req)
        self.policy.remove(req)
        req.status, req.instance = "running", instance
        req.chunk_seq += 1
        if req.chunk_seq == 1 and not req.is_probe:
            estimate = self.policy.length_estimate(req.group_id)
            if estimate is not None:
                self.first_estimates[req.request_id] = estimate
        self._flights[req.request_id] = _Flight(
            instance, max_chunk_tokens, kv_need, self._telemetry[instance]
        )
        self._running_on[instance].add(req.request_id)
        self._set_home(req.request_id, instance)
        proj = self._loads[instance]
        proj.num_running += 1
        proj.kv_tokens_used += kv_need
        return Dispatch(
            request_id=req.request_id,
            instance=instance,
            max_chunk_tokens=max_chunk_tokens,
            chunk_seq=req.chunk_seq,
        )

    def _land(self, request_id: str) -> None:
        flight = self._flights.pop(request_id)
        self._running_on[flight.instance].discard(request_id)
        proj = self._loads[flight.instance]
        proj.num_running -= 1
        if flight.telemetry == self._telemetry[flight.instance]:  # not yet in a report
            proj.kv_tokens_used -= flight.kv_need

    def _to_waiting(self, req: RequestState, now: float, *, kv_instance: int | None) -> None:
        req.status, req.instance, req.kv_instance = "waiting", None, kv_instance
        req.enqueued_at = now
        self._waiting[req.request_id] = req
        if self._index is not None:
            self._index.insert(req, self._home_of.get(req.request_id))
        self.policy.requeue(req)

    def _has_free_slot(self) -> bool:
        return any(p.num_running < p.max_running for p in self._loads if p.index not in self._down)

    def _check_instance(self, instance: int) -> int:
        if not 0 <= instance < self.num_instances:
            raise ValueError(f"instance {instance} out of range 0..{self.num_instances - 1}")
        return instance

    def request(self, request_id: str) -> RequestState:
        try:
            return self._requests[request_id]
        except KeyError:
            raise UnknownRequestError(request_id) from None

    def projected_load(self, instance: int) -> ProjectedLoad:
        """A copy of the core's current view of ``instance``."""
        return replace(self._loads[self._check_instance(instance)])

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._flights)

    @property
    def num_finished(self) -> int:
        return self._num_finished

    @property
    def is_done(self) -> bool:
        """All added requests finished."""
        return self._num_finished == len(self._requests)
