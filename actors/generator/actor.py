"""GeneratorActor: drives one `Engine`, chosen by the `backend` option.

Consumes `ChunkAssigned` (scheduler), `EndRollout` (drop parked KV), `WeightsBucket`
(versioned weights; the last bucket commits them once the engine is idle; the call is
answered after the swap), `GetLoad`. Emits one `ChunkFinished` per chunk to the scheduler,
with the tokens, logprobs, finish reason, timing, speculation statistics and the
generator's load and counters.

Speculation (option `spec`): with an engine that verifies drafts (`SpeculativeEngine`, as
the built-in one does), the `Speculator` drafts before each step for the decoding
requests from local suffix-tree replicas; with mode "group" a `DraftSync` task exchanges
tokens with the draft-tree store in the background. Any other engine is polled without
drafts.

A `RemoteEngine` (backend "sglang": a server over HTTP) is not polled: each chunk is one
awaited call in its own task, many in flight at once; the engine's `check` answers
`GetLoad` (so a lost server fails the scheduler's generator watch and its chunks are
re-queued; a chunk lost with its server is not reported), weights are swapped once no
chunk is in flight, and a background task probes the server's health.

All engine calls happen in one task, the step loop: handlers only queue work, so an engine
step (run in a worker thread, torch releases the GIL) never races with `add`. A chunk the
engine refuses (prompt longer than the context, out-of-vocabulary token, ...) comes back
at once as a `ChunkFinished` with finish reason "error" and the message; the actor keeps
serving.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.generator.cpus import cores_for, pin_process
from actors.generator.draft_sync import DraftSync
from actors.generator.engine import (
    ChunkResult,
    Engine,
    RemoteEngine,
    SpeculativeEngine,
    StepResult,
    error_result,
)
from actors.generator.errors import EngineError, ServerLostError
from actors.generator.options import GeneratorOptions, build_engine
from actors.generator.speculator import Speculator
from actors.generator.step_log import StepLog
from actors.generator.wire import chunk_finished, chunk_request, load_info
from transport.errors import TransportError
from transport.messages import (
    Ack,
    ChunkAssigned,
    EndRollout,
    GetLoad,
    LoadInfo,
    LoadReport,
    Message,
    SpecStats,
    WeightsBucket,
)


class GeneratorActor(Actor):
    role = "generator"
    Options = GeneratorOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: GeneratorOptions = ctx.options or GeneratorOptions()
        self.engine: Engine | None = None
        self.remote: RemoteEngine | None = None  # set instead of `engine` for remote backends
        self.idle = anyio.Event()  # set while a remote engine has no chunk in flight
        self.num_lost_chunks = 0
        self.pending: list[ChunkAssigned | EndRollout] = []
        self.wake = anyio.Event()
        self.active: dict[str, ChunkAssigned] = {}
        # when the engine step that produced a chunk's first token began: the chunk's start
        # (time spent queued or prefilling inside the engine before that is queueing delay)
        self.started: dict[str, float] = {}
        self.parked: set[str] = set()
        self.buckets: dict[str, torch.Tensor] = {}
        self.new_weights: tuple[dict[str, torch.Tensor], int, anyio.Event] | None = None
        self.num_chunks = 0
        self.spec: Speculator | None = None  # set when the engine verifies drafts
        self.sync: DraftSync | None = None
        self.step_log = StepLog.from_env(ctx.index)  # SEER_STEP_LOG: validation only
        self._step_span = (0.0, 0.0, 0.0)
        self._idle_s = 0.0  # waited for work since the last step (for the step log)

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            ChunkAssigned: self.handle_chunk_assigned,
            EndRollout: self.handle_end_rollout,
            WeightsBucket: self.handle_weights_bucket,
            GetLoad: self.handle_get_load,
        }

    async def on_start(self) -> None:
        if self.opts.pin_cores:
            cores = cores_for(self.ctx.index, self.opts.num_threads)
            if pin_process(cores):
                self.log.info("pinned", cores=sorted(cores))
            else:
                self.log.warning("pin_unsupported", platform=sys.platform)
        engine = await anyio.to_thread.run_sync(build_engine, self.opts, self.ctx.index)
        cfg = self.opts.spec
        if isinstance(engine, RemoteEngine):
            self.remote = engine
            await engine.start()
            self.idle.set()
            self.start_soon(engine.watch)
            if cfg.mode != "off":
                self.log.warning("speculation_unsupported", backend=self.opts.backend)
            return
        assert isinstance(engine, Engine)
        self.engine = engine
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
            if cfg.mode == "group" and self.has_peer("drafts"):
                self.sync = DraftSync(self.spec, self.mailbox, self.log)
                self.start_soon(self.sync.run)
        elif cfg.mode != "off":
            self.log.warning("speculation_unsupported", backend=self.opts.backend)
        self.start_soon(self._step_loop)

    async def on_stop(self) -> None:
        if self.remote is not None:
            await self.remote.aclose()

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        if self.remote is not None:
            if self.idle.is_set():
                self.idle = anyio.Event()
            self.active[msg.request_id] = msg
            self.start_soon(self._run_remote, self.remote, msg)
            return
        self.pending.append(msg)
        self.wake.set()

    async def handle_end_rollout(self, msg: EndRollout) -> None:
        if self.remote is not None:
            return  # the server's prefix cache holds (and evicts) what stays
        self.pending.append(msg)  # handled in arrival order by the step loop
        self.wake.set()

    async def handle_weights_bucket(self, msg: WeightsBucket) -> Ack:
        self.buckets.update({k: torch.as_tensor(v) for k, v in msg.tensors.items()})
        if not msg.is_last:
            return Ack()
        if self.remote is not None:
            state, self.buckets = self.buckets, {}
            await self.idle.wait()  # between iterations: nothing in flight
            await self.remote.update_weights(state, msg.version)
            self.log.info("weights_swapped", version=msg.version, tensors=len(state))
            return Ack()
        done = anyio.Event()
        self.new_weights = (self.buckets, msg.version, done)
        self.buckets = {}
        self.wake.set()
        await done.wait()
        return Ack()

    async def handle_get_load(self, msg: GetLoad) -> LoadReport:
        if self.remote is not None:
            await self.remote.check()  # raises when the server is (or was) lost
        return LoadReport(load=self.load_info())

    def load_info(self) -> LoadInfo:
        engine = self.remote if self.remote is not None else self._engine()
        return load_info(self.ctx.index, engine.load(), engine.counters(), engine.weight_version)

    def counters(self) -> dict[str, float]:
        out: dict[str, float] = {"num_chunks": self.num_chunks}
        if self.remote is not None:
            out["num_lost_chunks"] = self.num_lost_chunks
        if self.spec is not None:
            out.update({f"spec_{k}": v for k, v in self.spec.totals.items()})
        if self.sync is not None:
            out["num_store_failures"] = self.sync.num_store_failures
        return out

    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("engine not started")
        return self.engine

    async def _step_loop(self) -> None:
        engine = self._engine()
        while True:
            loop_start = time.time()
            await self._admit(engine)
            if self.new_weights is not None and not engine.has_work():
                self._swap_weights(engine)
            if engine.has_work():
                start = time.time()
                if self.spec is not None and isinstance(engine, SpeculativeEngine):
                    decoding = engine.decoding_request_ids()
                    drafts = self.spec.drafts(decoding)
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
                for request_id in msg.request_ids:
                    if request_id in self.parked:
                        engine.release(request_id)
                        self.parked.discard(request_id)
                if self.spec is not None:
                    self.spec.forget(msg.request_ids)
                continue
            self.active[msg.request_id] = msg
            if self.spec is not None:
                is_new_group = self.spec.start(
                    msg.request_id,
                    msg.group_id,
                    msg.chunk_seq,
                    msg.prompt_ids,
                    msg.generated_ids,
                    msg.is_probe,
                )
                if is_new_group and self.sync is not None:
                    self.sync.wake()  # pull its tree now, not at the next (slow) sync
            try:
                engine.add(chunk_request(msg))
            except EngineError as exc:
                self.log.warning("chunk_refused", request=msg.request_id, error=str(exc))
                await self._report(error_result(msg.request_id, exc, engine.weight_version))
            else:
                self.parked.discard(msg.request_id)

    def _swap_weights(self, engine: Engine) -> None:
        assert self.new_weights is not None
        state, version, done = self.new_weights
        self.new_weights = None
        for request_id in list(self.parked):
            engine.release(request_id)
        self.parked.clear()
        engine.update_weights(state, version)
        self.log.info("weights_swapped", version=version, tensors=len(state))
        done.set()

    async def _run_remote(self, engine: RemoteEngine, msg: ChunkAssigned) -> None:
        """One chunk on a remote engine: one awaited call, reported unless its server was
        lost (then the scheduler re-queues it when `GetLoad` fails)."""
        self.started[msg.request_id] = time.time()
        try:
            chunk = await engine.generate(chunk_request(msg))
        except ServerLostError as exc:
            self.num_lost_chunks += 1
            self.active.pop(msg.request_id, None)
            self.started.pop(msg.request_id, None)
            self.log.warning("chunk_lost", request=msg.request_id, error=str(exc))
            chunk = None
        except EngineError as exc:
            self.log.warning("chunk_refused", request=msg.request_id, error=str(exc))
            chunk = error_result(msg.request_id, exc, engine.weight_version)
        if chunk is not None:
            await self._report(chunk)
        if not self.active:
            self.idle.set()

    async def _report(self, chunk: ChunkResult) -> None:
        msg = self.active.pop(chunk.request_id)
        end = time.time()
        self.num_chunks += 1
        if chunk.finish_reason == "chunk" and self.remote is None:
            self.parked.add(chunk.request_id)
        spec = self.spec.end(chunk.request_id) if self.spec is not None else SpecStats()
        if chunk.num_verify_steps:  # the server speculated on its own (SGLang's spec_*)
            spec = SpecStats(
                num_steps=chunk.num_verify_steps,
                num_tokens=len(chunk.token_ids),
                num_draft_tokens=chunk.num_draft_tokens,
                num_accepted_tokens=chunk.num_accepted_tokens,
            )
        done = chunk_finished(
            msg,
            chunk,
            instance=self.ctx.index,
            start_time=self.started.pop(chunk.request_id, end),
            end_time=end,
            load=self.load_info(),
            spec=spec,
        )
        try:
            await self.send_to("scheduler", 0, done)
        except TransportError as exc:  # no scheduler, no rollout: keep serving regardless
            self.log.error("chunk_result_undeliverable", request=chunk.request_id, error=str(exc))
