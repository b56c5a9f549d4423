"""Drivers: how a generator actor runs its engine, in this process or behind a server.

The actor hands chunks, rollout ends and new weights to one `EngineDriver`, chosen once
when its engine is built (`make_driver`), and reports each chunk the driver finishes:
- `LocalDriver` steps an `Engine` (the built-in one) in this process. All engine calls
  happen in one task, the step loop: the actor's handlers only queue work, so an engine
  step (run in a worker thread, torch releases the GIL) never races with `add`. A chunk
  that ends at its budget parks its KV until its next chunk or the rollout's end. With an
  engine that verifies drafts (`SpeculativeEngine`) a `Speculator` drafts before each step
  (and with mode "group" a `DraftSync` exchanges tokens with the draft-tree store); any
  other engine is polled without drafts. New weights wait until the engine is idle.
- `RemoteDriver` calls a `RemoteEngine` (a server over HTTP, backend "sglang"): each chunk
  is one awaited call in its own task, many in flight at once; `check` asks the server
  (so a lost server fails the scheduler's generator watch and its chunks are re-queued; a
  chunk lost with its server is not reported), weights are swapped once no chunk is in
  flight, and a background task probes the server's health.

One chunk per request at a time (`active`, by request id, holds the chunk's sequence): a
chunk of a request that still has an older chunk here (the scheduler declared this
generator lost, for example while it was frozen, took the request back, then gave it here
again) aborts the older chunk's engine request and replaces it; the older chunk's result is
dropped (the scheduler would refuse it as stale), and an older chunk that arrives after a
newer one is dropped unrun. A rollout's end (`EndRollout`: finished, or cancelled by the
driver) aborts its chunks still running here, in the engine or on the server, so that a
cancelled rollout frees its capacity at once (`num_cancelled_chunks`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import anyio
import structlog
import torch

from actors.base import Mailbox
from actors.generator.draft_sync import DraftSync
from actors.generator.engine import (
    ChunkResult,
    Engine,
    RemoteEngine,
    SpeculativeEngine,
    StepResult,
    error_result,
)
from actors.generator.errors import (
    EngineError,
    RequestNotInEngineError,
    ServerLostError,
    WeightLoadError,
)
from actors.generator.options import GeneratorOptions
from actors.generator.speculator import Speculator
from actors.generator.step_log import StepLog
from actors.generator.wire import chunk_request, load_info
from transport.messages import ChunkAssigned, EndRollout, LoadInfo, SpecStats

# the actor sends a finished chunk on (the driver took the chunk out of `active`)
Report = Callable[[ChunkAssigned, ChunkResult], Awaitable[None]]
StartSoon = Callable[..., None]  # the actor's `start_soon`: a task that lives with it
Weights = dict[str, torch.Tensor]


class EngineDriver(Protocol):
    """What a generator actor asks of the engine it drives. Chunks taken (`assign`) are in
    the actor's `active` until reported; the driver reports each through `report`."""

    async def start(self) -> None:
        """Start the engine and the driver's background tasks."""
        ...

    async def aclose(self) -> None: ...

    def assign(self, msg: ChunkAssigned) -> None:
        """Run this chunk; it is reported when it ends (or refused)."""
        ...

    def end_rollout(self, msg: EndRollout) -> None:
        """The rollout ended: drop what is kept for its requests."""
        ...

    async def update_weights(self, state: Weights, version: int) -> None:
        """Swap the engine's weights once no chunk runs; returns after the swap."""
        ...

    async def check(self) -> None:
        """Raise when the engine can no longer serve (a lost server)."""
        ...

    def load_info(self, instance: int) -> LoadInfo: ...

    def counters(self) -> dict[str, float]: ...

    def chunk_ended(self, chunk: ChunkResult) -> SpecStats:
        """A chunk is being reported: its speculation statistics (none: zeros)."""
        ...


def make_driver(
    engine: Engine | RemoteEngine,
    opts: GeneratorOptions,
    *,
    index: int,
    report: Report,
    start_soon: StartSoon,
    active: dict[str, ChunkAssigned],
    started: dict[str, float],
    mailbox: Mailbox,
    has_draft_store: bool,
    log: structlog.BoundLogger,
) -> EngineDriver:
    """The driver for this engine: remote for a `RemoteEngine`, local otherwise."""
    if isinstance(engine, RemoteEngine):
        return RemoteDriver(
            engine,
            opts,
            report=report,
            start_soon=start_soon,
            active=active,
            started=started,
            log=log,
        )
    return LocalDriver(
        engine,
        opts,
        report=report,
        start_soon=start_soon,
        active=active,
        started=started,
        step_log=StepLog.from_env(index),  # SEER_STEP_LOG: validation only
        mailbox=mailbox,
        has_draft_store=has_draft_store,
        log=log,
    )


def ended_chunks(
    active: dict[str, ChunkAssigned], msg: EndRollout, started: dict[str, float]
) -> list[str]:
    """Take the chunks of ended rollout `msg` still running here (a cancelled rollout's, or
    an older chunk of a generator that was lost and came back) out of `active`; their ids.
    Their results, should one still come, are dropped as for no chunk taken."""
    ids = [rid for rid, chunk in active.items() if chunk.rollout_id == msg.rollout_id]
    for rid in ids:
        del active[rid]
        started.pop(rid, None)
    return ids


def will_prefill(engine: Engine, decoding: Sequence[str]) -> bool:
    """Whether the engine's next step likely prefills: a running row is not decoding yet
    (its prompt is mid-prefill), or a waiting request has a free slot to be admitted to."""
    load = engine.load()
    return load.num_running > len(decoding) or (
        load.num_waiting > 0 and load.num_running < load.max_running
    )


class LocalDriver:
    """An `Engine` stepped in this process (see the module)."""

    def __init__(
        self,
        engine: Engine,
        opts: GeneratorOptions,
        *,
        report: Report,
        start_soon: StartSoon,
        active: dict[str, ChunkAssigned],
        started: dict[str, float],
        step_log: StepLog | None,
        mailbox: Mailbox,
        has_draft_store: bool,
        log: structlog.BoundLogger,
    ) -> None:
        self.engine = engine
        self.opts = opts
        self.report = report
        self.start_soon = start_soon
        self.active = active
        # when the engine step that produced a chunk's first token began: the chunk's start
        # (time spent queued or prefilling inside the engine before that is queueing delay)
        self.started = started
        self.step_log = step_log
        self.mailbox = mailbox
        self.has_draft_store = has_draft_store
        self.log = log
        self.pending: list[ChunkAssigned | EndRollout] = []
        self.wake = anyio.Event()
        self.parked: set[str] = set()
        self.new_weights: tuple[Weights, int, anyio.Event] | None = None
        self.weights_error: Exception | None = None  # why the last swap was refused
        self.spec: Speculator | None = None  # set when the engine verifies drafts
        self.sync: DraftSync | None = None
        self._step_span = (0.0, 0.0, 0.0)
        self._idle_s = 0.0  # waited for work since the last step (for the step log)
        self.num_superseded = 0  # older chunks aborted for a newer one of their request
        self.num_stale_chunks = 0  # chunks (or results) dropped as older than the one here
        self.num_cancelled = 0  # chunks aborted in the engine because their rollout ended

    async def start(self) -> None:
        engine, cfg = self.engine, self.opts.spec
        if isinstance(engine, SpeculativeEngine):
            if cfg.mode != "off" and cfg.budget == "adaptive":
                await anyio.to_thread.run_sync(engine.measure_step_times)  # T(B, g)
                if self.step_log is not None:  # what the policy will price drafts by
                    limit = self.opts.max_batch
                    self.step_log.write_step_times(
                        [
                            (b, g, engine.step_time(b, g))
                            for b in range(1, limit + 1)
                            for g in range(cfg.g_max + 1)
                        ]
                    )
            self.spec = Speculator(cfg, engine.step_time, padded=engine.pads_drafts)
            if cfg.mode == "group" and self.has_draft_store:
                self.sync = DraftSync(self.spec, self.mailbox, self.log)
                self.start_soon(self.sync.run)
        elif cfg.mode != "off":
            self.log.warning("speculation_unsupported", backend=self.opts.backend)
        self.start_soon(self._step_loop)

    async def aclose(self) -> None:
        pass

    def assign(self, msg: ChunkAssigned) -> None:
        self.pending.append(msg)
        self.wake.set()

    def end_rollout(self, msg: EndRollout) -> None:
        self.pending.append(msg)  # handled in arrival order by the step loop
        self.wake.set()

    async def update_weights(self, state: Weights, version: int) -> None:
        done = anyio.Event()
        self.new_weights = (state, version, done)
        self.wake.set()
        await done.wait()
        error, self.weights_error = self.weights_error, None
        if error is not None:  # refused: the old weights still serve
            raise error

    async def check(self) -> None:
        pass

    def load_info(self, instance: int) -> LoadInfo:
        e = self.engine
        return load_info(instance, e.load(), e.counters(), e.weight_version)

    def counters(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.spec is not None:
            out.update({f"spec_{k}": v for k, v in self.spec.totals.items()})
        if self.sync is not None:
            out["num_store_failures"] = self.sync.num_store_failures
        out["num_superseded_chunks"] = self.num_superseded
        out["num_stale_chunks"] = self.num_stale_chunks
        out["num_cancelled_chunks"] = self.num_cancelled
        return out

    def chunk_ended(self, chunk: ChunkResult) -> SpecStats:
        if chunk.finish_reason == "chunk":
            self.parked.add(chunk.request_id)
        return self.spec.end(chunk.request_id) if self.spec is not None else SpecStats()

    async def _step_loop(self) -> None:
        engine = self.engine
        while True:
            loop_start = time.time()
            await self._admit(engine)
            if self.new_weights is not None and not engine.has_work():
                self._swap_weights(engine)
            if engine.has_work():
                start = time.time()
                if self.spec is not None and isinstance(engine, SpeculativeEngine):
                    decoding = engine.decoding_request_ids()
                    drafts = self.spec.drafts(decoding, prefill=will_prefill(engine, decoding))
                    result = await anyio.to_thread.run_sync(self._timed, engine.step, drafts)
                    self.spec.observe(result, decoding)
                else:
                    result = await anyio.to_thread.run_sync(self._timed, engine.poll)
                if self.step_log is not None:
                    self.step_log.add(loop_start, *self._step_span, result, self._idle_s)
                    self._idle_s = 0.0
                for delta in result.deltas:
                    self.started.setdefault(delta.request_id, start)
                if self.sync is not None and result.finished:  # the store first (history)
                    self.sync.push_ended([c.request_id for c in result.finished])
                for chunk in result.finished:
                    await self._report(chunk)
                await anyio.lowlevel.checkpoint()
            else:
                idle_from = time.time()
                await self.wake.wait()
                self.wake = anyio.Event()
                self._idle_s += time.time() - idle_from

    def _timed(self, call: Callable[..., StepResult], *args: object) -> StepResult:
        """An engine call in the worker thread; its span kept for the step log."""
        start, cpu = time.time(), time.thread_time()
        result = call(*args)
        self._step_span = (start, time.time(), time.thread_time() - cpu)
        return result

    async def _admit(self, engine: Engine) -> None:
        pending, self.pending = self.pending, []
        for msg in pending:
            if isinstance(msg, EndRollout):
                if self.step_log is not None:
                    await anyio.to_thread.run_sync(self.step_log.flush, msg.rollout_id)
                for request_id in ended_chunks(self.active, msg, self.started):
                    self.num_cancelled += 1  # a cancelled rollout's: free its slot now
                    with contextlib.suppress(RequestNotInEngineError):
                        engine.abort(request_id)
                    self.log.warning("chunk_cancelled", request=request_id)
                for request_id in msg.request_ids:
                    if request_id in self.parked:
                        engine.release(request_id)
                        self.parked.discard(request_id)
                if self.spec is not None:
                    self.spec.forget(msg.request_ids)
                continue
            if not self._supersede(engine, msg):
                continue
            self.active[msg.request_id] = msg
            try:  # the engine checks the request first (token ids, context, sampling)
                engine.add(chunk_request(msg))
            except EngineError as exc:
                self.log.warning("chunk_refused", request=msg.request_id, error=str(exc))
                await self._report(error_result(msg.request_id, exc, engine.weight_version))
                continue
            self.parked.discard(msg.request_id)
            if self.spec is not None:
                is_new_group = self.spec.start(
                    msg.request_id,
                    msg.group_id,
                    msg.chunk_seq,
                    msg.prompt_ids,
                    msg.generated_ids,
                    msg.is_probe,
                    fresh=msg.num_fresh_tokens,
                )
                if is_new_group and self.sync is not None:
                    self.sync.wake()  # pull its tree now, not at the next (slow) sync

    def _supersede(self, engine: Engine, msg: ChunkAssigned) -> bool:
        """Make room for chunk `msg`: abort an older chunk of its request still in the engine
        (its result is dropped); False when `msg` itself is older than the one here."""
        old = self.active.get(msg.request_id)
        if old is None:
            return True
        if old.rollout_id == msg.rollout_id and old.chunk_seq >= msg.chunk_seq:
            self.num_stale_chunks += 1
            self.log.warning("chunk_stale", request=msg.request_id, seq=msg.chunk_seq)
            return False
        del self.active[msg.request_id]
        self.started.pop(msg.request_id, None)
        with contextlib.suppress(RequestNotInEngineError):  # it ended, unreported
            engine.abort(msg.request_id)
        if self.spec is not None:
            self.spec.end(msg.request_id)
        self.num_superseded += 1
        self.log.warning(
            "chunk_superseded", request=msg.request_id, old=old.chunk_seq, new=msg.chunk_seq
        )
        return True

    async def _report(self, chunk: ChunkResult) -> None:
        msg = self.active.pop(chunk.request_id, None)
        if msg is None:  # defensive: a result for no chunk taken here
            self.num_stale_chunks += 1
            self.log.warning("chunk_result_dropped", request=chunk.request_id)
            return
        await self.report(msg, chunk)

    def _swap_weights(self, engine: Engine) -> None:
        assert self.new_weights is not None
        state, version, done = self.new_weights
        self.new_weights = None
        try:  # names and shapes are checked before any weight changes
            engine.update_weights(state, version)
        except (ValueError, RuntimeError) as exc:  # refused: keep serving the old weights
            self.weights_error = WeightLoadError(f"weights version {version} not loaded: {exc}")
            self.log.error("weights_refused", version=version, error=str(exc))
        else:  # parked KV is stale now
            for request_id in self.parked:
                engine.release(request_id)
            self.parked.clear()
            self.log.info("weights_swapped", version=version, tensors=len(state))
        done.set()


class RemoteDriver:
    """A `RemoteEngine` behind a server, each chunk one awaited call (see the module)."""

    def __init__(
        self,
        engine: RemoteEngine,
        opts: GeneratorOptions,
        *,
        report: Report,
        start_soon: StartSoon,
        active: dict[str, ChunkAssigned],
        started: dict[str, float],
        log: structlog.BoundLogger,
    ) -> None:
        self.engine = engine
        self.opts = opts
        self.report = report
        self.start_soon = start_soon
        self.active = active
        self.started = started
        self.log = log
        self.idle = anyio.Event()  # set while no chunk is in flight
        self.num_lost_chunks = 0
        self.num_superseded = 0
        self.num_stale_chunks = 0
        self.num_cancelled = 0  # calls aborted on the server because their rollout ended
        self.running: dict[str, anyio.Event] = {}  # request id -> set when its call ended

    async def start(self) -> None:
        await self.engine.start()
        self.idle.set()
        self.start_soon(self.engine.watch)
        if self.opts.spec.mode != "off":
            self.log.warning("speculation_unsupported", backend=self.opts.backend)

    async def aclose(self) -> None:
        await self.engine.aclose()

    def assign(self, msg: ChunkAssigned) -> None:
        old = self.active.get(msg.request_id)
        if old is not None and old.rollout_id == msg.rollout_id and old.chunk_seq >= msg.chunk_seq:
            self.num_stale_chunks += 1
            self.log.warning("chunk_stale", request=msg.request_id, seq=msg.chunk_seq)
            return
        if self.idle.is_set():
            self.idle = anyio.Event()
        self.active[msg.request_id] = msg  # an older chunk's result is dropped (`_run`)
        self.start_soon(self._run, msg, self.running.get(msg.request_id))
        self.running[msg.request_id] = anyio.Event()

    def end_rollout(self, msg: EndRollout) -> None:
        # the server's prefix cache holds (and evicts) what stays; a cancelled rollout's
        # calls still running are aborted on the server (their results dropped in `_call`)
        for request_id in ended_chunks(self.active, msg, self.started):
            self.num_cancelled += 1
            self.log.warning("chunk_cancelled", request=request_id)
            self.start_soon(self._abort, request_id)

    async def _abort(self, request_id: str) -> None:
        try:
            await self.engine.abort(request_id)
        except (EngineError, ServerLostError) as exc:
            self.log.warning("abort_failed", request=request_id, error=str(exc))

    async def update_weights(self, state: Weights, version: int) -> None:
        await self.idle.wait()  # between iterations: nothing in flight
        await self.engine.update_weights(state, version)
        self.log.info("weights_swapped", version=version, tensors=len(state))

    async def check(self) -> None:
        await self.engine.check()  # raises when the server is (or was) lost

    def load_info(self, instance: int) -> LoadInfo:
        e = self.engine
        return load_info(instance, e.load(), e.counters(), e.weight_version)

    def counters(self) -> dict[str, float]:
        return {
            "num_lost_chunks": self.num_lost_chunks,
            "num_superseded_chunks": self.num_superseded,
            "num_stale_chunks": self.num_stale_chunks,
            "num_cancelled_chunks": self.num_cancelled,
        }

    def chunk_ended(self, chunk: ChunkResult) -> SpecStats:
        return SpecStats()  # the server's own speculation, if any, is in the chunk

    async def _run(self, msg: ChunkAssigned, older: anyio.Event | None) -> None:
        """One chunk: one awaited call, reported unless its server was lost (then the
        scheduler re-queues it when `GetLoad` fails) or a newer chunk of its request
        replaced it. `older`: the end of an older chunk of the request still in flight,
        aborted first (the server holds one call per request)."""
        rid = msg.request_id
        done = self.running[rid]
        try:
            if older is not None and not older.is_set():
                self.num_superseded += 1
                self.log.warning("chunk_superseded", request=rid, new=msg.chunk_seq)
                try:
                    await self.engine.abort(rid)
                except (EngineError, ServerLostError) as exc:
                    self.log.warning("abort_failed", request=rid, error=str(exc))
                await older.wait()
            if self.active.get(rid) is not msg:
                return  # replaced while it waited
            await self._call(msg)
        finally:
            done.set()
            if self.running.get(rid) is done:
                del self.running[rid]
            if not self.active:
                self.idle.set()

    async def _call(self, msg: ChunkAssigned) -> None:
        rid = msg.request_id
        self.started[rid] = time.time()
        chunk: ChunkResult | None
        try:
            chunk = await self.engine.generate(chunk_request(msg))
        except ServerLostError as exc:
            self.num_lost_chunks += 1
            self.log.warning("chunk_lost", request=rid, error=str(exc))
            chunk = None
        except EngineError as exc:
            self.log.warning("chunk_refused", request=rid, error=str(exc))
            chunk = error_result(rid, exc, self.engine.weight_version)
        if self.active.get(rid) is not msg:  # a newer chunk of the request replaced it
            self.num_stale_chunks += 1
            self.started.pop(rid, None)
            self.log.warning("chunk_result_dropped", request=rid, seq=msg.chunk_seq)
            return
        del self.active[rid]
        if chunk is None:
            self.started.pop(rid, None)
            return
        await self.report(msg, chunk)
