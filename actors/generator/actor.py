"""GeneratorActor: drives one `Engine` (the built-in `TorchEngine` here).

Consumes `ChunkAssigned` (scheduler), `EndRollout` (drop parked KV), `WeightsBucket`
(versioned weights; the last bucket commits them once the engine is idle; the call is
answered after the swap), `GetLoad`. Emits one `ChunkFinished` per chunk to the scheduler,
with the tokens, logprobs, finish reason, timing, speculation statistics and the
generator's load and counters.

Speculation (option `spec`, an `actors.drafts.policy.SpecConfig`): before each step the
`Speculator` drafts for the decoding requests from local suffix-tree replicas; with mode
"group" a background task pushes this generator's new tokens to the draft store
(`TokensAppended`) and pulls what its replicas lack (`SyncDrafts`) every
`spec.sync_interval_s`; while the batch is too large for drafts to pay it pushes 10x less
often and pulls 40x less often (the first pull after catches up). A store that does not
answer costs drafts, never progress: decoding goes on with what the replicas hold (this
generator's own requests) and the sync retries.

All engine calls happen in one task, the step loop: handlers only queue work, so an engine
step (run in a worker thread, torch releases the GIL) never races with `add`. A chunk the
engine refuses (prompt longer than the context, out-of-vocabulary token, ...) comes back
at once as a `ChunkFinished` with finish reason "error" and the message; the actor keeps
serving.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.drafts.policy import SpecConfig
from actors.drafts.speculator import Speculator
from actors.generator.config import EngineConfig
from actors.generator.engine import ChunkRequest, ChunkResult, SamplingParams, error_result
from actors.generator.errors import EngineError
from actors.generator.torch_engine import TorchEngine
from actors.model import LlamaModel, ModelConfig, load_model
from transport.errors import TransportError
from transport.messages import (
    Ack,
    ChunkAssigned,
    ChunkFinished,
    DraftDeltas,
    EndRollout,
    GetLoad,
    LoadInfo,
    LoadReport,
    Message,
    TokensAppended,
    WeightsBucket,
)


@dataclass(frozen=True, kw_only=True)
class GeneratorOptions:
    """`model_path`: safetensors saved by `save_model` ("" = a random model from
    `model_seed` with the shape below, identical in every generator)."""

    model_path: str = ""
    model_seed: int = 0
    vocab_size: int = 259
    hidden: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate: int = 344
    max_context: int = 1024
    max_batch: int = 32
    kv_budget_tokens: int = 32768
    max_prefill_tokens: int = 512
    num_threads: int = 1
    eos_token_id: int | None = None
    profile: bool = False
    spec: SpecConfig = field(default_factory=SpecConfig)  # speculation (a TOML sub-table)

    def model_config(self) -> ModelConfig:
        return ModelConfig(
            vocab_size=self.vocab_size,
            hidden=self.hidden,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            intermediate=self.intermediate,
            max_context=self.max_context,
        )

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            max_batch=self.max_batch,
            kv_budget_tokens=self.kv_budget_tokens,
            max_prefill_tokens=self.max_prefill_tokens,
            num_threads=self.num_threads,
            eos_token_id=self.eos_token_id,
            profile=self.profile,
        )


def build_engine(opts: GeneratorOptions) -> TorchEngine:
    if opts.model_path:
        model = load_model(opts.model_path)
    else:
        model = LlamaModel.random(opts.model_config(), seed=opts.model_seed)
    return TorchEngine(model, opts.engine_config())


class GeneratorActor(Actor):
    role = "generator"
    Options = GeneratorOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: GeneratorOptions = ctx.options or GeneratorOptions()
        self.engine: TorchEngine | None = None
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
        self.spec_config = self.opts.spec
        self.spec: Speculator | None = None
        self.store_ok = True
        self.num_store_failures = 0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            ChunkAssigned: self.handle_chunk_assigned,
            EndRollout: self.handle_end_rollout,
            WeightsBucket: self.handle_weights_bucket,
            GetLoad: self.handle_get_load,
        }

    async def on_start(self) -> None:
        self.engine = engine = await anyio.to_thread.run_sync(build_engine, self.opts)
        cfg = self.spec_config
        if cfg.mode != "off" and cfg.budget == "adaptive":
            await anyio.to_thread.run_sync(lambda: engine.profile)  # T(B, g) for the policy
        self.spec = Speculator(cfg, engine.step_time)
        self.start_soon(self._step_loop)
        if cfg.mode == "group" and self.has_peer("drafts"):
            self.start_soon(self._sync_loop)

    async def handle_chunk_assigned(self, msg: ChunkAssigned) -> None:
        self.pending.append(msg)
        self.wake.set()

    async def handle_end_rollout(self, msg: EndRollout) -> None:
        self.pending.append(msg)  # handled in arrival order by the step loop
        self.wake.set()

    async def handle_weights_bucket(self, msg: WeightsBucket) -> Ack:
        self.buckets.update({k: torch.as_tensor(v) for k, v in msg.tensors.items()})
        if not msg.is_last:
            return Ack()
        done = anyio.Event()
        self.new_weights = (self.buckets, msg.version, done)
        self.buckets = {}
        self.wake.set()
        await done.wait()
        return Ack()

    async def handle_get_load(self, msg: GetLoad) -> LoadReport:
        return LoadReport(load=self.load_info())

    def load_info(self) -> LoadInfo:
        engine = self._engine()
        load, counters = engine.load(), engine.counters()
        return LoadInfo(
            instance=self.ctx.index,
            num_running=load.num_running,
            num_waiting=load.num_waiting,
            num_parked=load.num_parked,
            kv_used=load.kv_tokens_used,
            kv_total=load.kv_tokens_total,
            max_running=engine.config.max_batch,
            weight_version=engine.weight_version,
            preemptions=counters.num_preemptions,
            recomputed_tokens=counters.num_recomputed_tokens,
            reprefilled_tokens=counters.num_reprefilled_tokens,
            generated_tokens=counters.num_generated_tokens,
            drafted_tokens=counters.num_draft_tokens,
            accepted_tokens=counters.num_accepted_tokens,
        )

    def counters(self) -> dict[str, float]:
        spec = self._spec()
        return {
            "chunks": self.num_chunks,
            "spec_steps": spec.totals["steps"],
            "spec_tokens": spec.totals["tokens"],
            "spec_drafted": spec.totals["drafted"],
            "spec_accepted": spec.totals["accepted"],
            "store_failures": self.num_store_failures,
        }

    def _spec(self) -> Speculator:
        if self.spec is None:
            raise RuntimeError("speculator not started")
        return self.spec

    def _engine(self) -> TorchEngine:
        if self.engine is None:
            raise RuntimeError("engine not started")
        return self.engine

    async def _step_loop(self) -> None:
        engine = self._engine()
        while True:
            await self._admit(engine)
            if self.new_weights is not None and not engine.has_work():
                self._swap_weights(engine)
            if engine.has_work():
                decoding = engine.decoding_request_ids()
                drafts = self._spec().drafts(decoding)
                start = time.time()
                result = await anyio.to_thread.run_sync(engine.step, drafts)
                self._spec().observe(result, decoding)
                for delta in result.deltas:
                    self.started.setdefault(delta.request_id, start)
                for chunk in result.finished:
                    await self._report(chunk)
                await anyio.lowlevel.checkpoint()
            else:
                await self.wake.wait()
                self.wake = anyio.Event()

    async def _admit(self, engine: TorchEngine) -> None:
        pending, self.pending = self.pending, []
        for msg in pending:
            if isinstance(msg, EndRollout):
                for request_id in msg.request_ids:
                    if request_id in self.parked:
                        engine.release(request_id)
                        self.parked.discard(request_id)
                self._spec().forget(msg.request_ids)
                continue
            self.active[msg.request_id] = msg
            self._spec().start(
                msg.request_id,
                msg.group_id,
                msg.chunk_seq,
                msg.prompt_ids,
                msg.generated_ids,
                msg.is_probe,
            )
            try:
                engine.add(_chunk_request(msg))
            except EngineError as exc:
                self.log.warning("chunk_refused", request=msg.request_id, error=str(exc))
                await self._report(error_result(msg.request_id, exc, engine.weight_version))
            else:
                self.parked.discard(msg.request_id)

    def _swap_weights(self, engine: TorchEngine) -> None:
        assert self.new_weights is not None
        state, version, done = self.new_weights
        self.new_weights = None
        for request_id in list(self.parked):
            engine.release(request_id)
        self.parked.clear()
        engine.update_weights(state, version)
        self.log.info("weights_swapped", version=version, tensors=len(state))
        done.set()

    async def _report(self, chunk: ChunkResult) -> None:
        msg = self.active.pop(chunk.request_id)
        end = time.time()
        self.num_chunks += 1
        if chunk.finish_reason == "chunk":
            self.parked.add(chunk.request_id)
        done = ChunkFinished(
            rollout_id=msg.rollout_id,
            request_id=msg.request_id,
            chunk_seq=msg.chunk_seq,
            instance=self.ctx.index,
            token_ids=chunk.token_ids,
            logprobs=chunk.logprobs,
            finish_reason=chunk.finish_reason,
            weight_version=chunk.weight_version,
            start_time=self.started.pop(chunk.request_id, end),
            end_time=end,
            cached_tokens=chunk.num_cached_tokens,
            load=self.load_info(),
            error=chunk.error or "",
            spec=self._spec().end(chunk.request_id),
        )
        await self.send_to("scheduler", 0, done)

    async def _sync_loop(self) -> None:
        """Push new tokens to the draft store, pull what the replicas lack; never blocks
        decoding, and backs off while the store does not answer."""
        spec, cfg = self._spec(), self.spec_config
        client = spec.client
        assert client is not None
        for cycle in itertools.count():
            # while drafts cannot pay at the running batch size, push this generator's
            # tokens 10x less often (other generators may be drafting from them) and pull
            # only every 4th time (decoding siblings' tokens nobody drafts from takes CPU
            # from the engine; the pull still checks the store is alive, and the first
            # pull once drafting resumes catches up)
            active = spec.is_drafting and self.store_ok
            await anyio.sleep(cfg.sync_interval_s * (1 if active else 10))
            appends = client.take_appends()
            pull = spec.is_drafting or not self.store_ok or cycle % 4 == 0
            request = client.sync_message() if pull else None
            try:
                with anyio.fail_after(cfg.store_timeout_s):
                    if appends:
                        await self.send_to("drafts", 0, TokensAppended(appends=appends))
                    if request is not None:
                        reply = await self.call("drafts", 0, request, timeout=cfg.store_timeout_s)
                        if isinstance(reply, DraftDeltas):
                            client.apply(reply)
            except (TransportError, TimeoutError) as exc:
                self.num_store_failures += 1
                if self.store_ok:
                    self.log.warning("draft_store_unreachable", error=f"{type(exc).__name__}")
                self.store_ok = False
            else:
                if not self.store_ok:
                    self.log.info("draft_store_back")
                self.store_ok = True


def _chunk_request(msg: ChunkAssigned) -> ChunkRequest:
    s = msg.sampling
    params = SamplingParams(
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        seed=s.seed,
        ignore_eos=s.ignore_eos,
        stop_token_ids=s.stop_token_ids,
    )
    return ChunkRequest(
        request_id=msg.request_id,
        prompt_ids=msg.prompt_ids,
        max_new_tokens=msg.max_tokens,
        generated_ids=msg.generated_ids,
        params=params,
        weight_version=msg.weight_version,
        max_total_new_tokens=msg.total_limit,
    )
