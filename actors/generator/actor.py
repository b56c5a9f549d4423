"""GeneratorActor: drives one engine, chosen by the `backend` option.

Consumes `ChunkAssigned` (scheduler), `EndRollout` (drop parked KV), `WeightsBucket`
(versioned weights; the last bucket commits them once the engine is idle; the call is
answered after the swap), `GetLoad`. Emits one `ChunkFinished` per chunk to the scheduler,
with the tokens, logprobs, finish reason, timing, speculation statistics and the
generator's load and counters.

How the engine runs is its driver's (`actors.generator.drivers`), chosen once when the
engine is built: the built-in engine is stepped in this process by one step loop (with
speculation, `Speculator` and `DraftSync`), a `RemoteEngine` (backend "sglang": a server
over HTTP) gets one awaited call per chunk, many in flight. A chunk the engine refuses
(prompt longer than the context, out-of-vocabulary token, ...) comes back at once as a
`ChunkFinished` with finish reason "error" and the message; the actor keeps serving.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.generator.cpus import cores_for, pin_process
from actors.generator.drivers import EngineDriver, make_driver
from actors.generator.engine import ChunkResult
from actors.generator.options import GeneratorOptions, build_engine
from actors.generator.wire import chunk_finished
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
        self.driver: EngineDriver | None = None  # set when the engine is built (`on_start`)
        # chunks taken, not yet reported: one per request (a newer chunk of the same request,
        # sent after the scheduler gave up on this generator and took it back, replaces an
        # older one, whose engine request is aborted and whose result is dropped)
        self.active: dict[str, ChunkAssigned] = {}
        # when a chunk started (for the built-in engine: when the engine step that produced
        # its first token began; time queued or prefilling before that is queueing delay)
        self.started: dict[str, float] = {}
        self.buckets: dict[str, torch.Tensor] = {}
        self.num_chunks = 0

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
        self.driver = make_driver(
            engine,
            self.opts,
            index=self.ctx.index,
            report=self._report,
            start_soon=self.start_soon,
            active=self.active,
            started=self.started,
            mailbox=self.mailbox,
            has_draft_store=self.has_peer("drafts"),
            log=self.log,
        )
        await self.driver.start()

    async def on_stop(self) -> None:
        if self.driver is not None:
            await self.driver.aclose()

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        self._driver().assign(msg)

    async def handle_end_rollout(self, msg: EndRollout) -> None:
        self._driver().end_rollout(msg)

    async def handle_weights_bucket(self, msg: WeightsBucket) -> Ack:
        self.buckets.update({k: torch.as_tensor(v) for k, v in msg.tensors.items()})
        if not msg.is_last:
            return Ack()
        state, self.buckets = self.buckets, {}
        await self._driver().update_weights(state, msg.version)
        return Ack()

    async def handle_get_load(self, msg: GetLoad) -> LoadReport:
        await self._driver().check()
        return LoadReport(load=self.load_info())

    def load_info(self) -> LoadInfo:
        return self._driver().load_info(self.ctx.index)

    def counters(self) -> dict[str, float]:
        out: dict[str, float] = {"num_chunks": self.num_chunks}
        if self.driver is not None:
            out.update(self.driver.counters())
        return out

    def _driver(self) -> EngineDriver:
        if self.driver is None:
            raise RuntimeError("engine not started")
        return self.driver

    async def _report(self, msg: ChunkAssigned, chunk: ChunkResult) -> None:
        """Send chunk `msg`'s result (the driver took it out of `active`)."""
        end = time.time()
        self.num_chunks += 1
        spec = self._driver().chunk_ended(chunk)
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
