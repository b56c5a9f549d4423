"""EngineBridge: the built-in engine on its own thread, driven from an asyncio server.

Consumes: ``GenerateSpec``s (each becomes one engine chunk: SGLang has no chunks, so a
``/generate`` request is one chunk of ``max_new_tokens`` tokens) and control calls (abort by
rid prefix, pause in SGLang's three modes, continue, flush, weight swaps and version labels).
Emits: per request, ``Delta`` / ``Version`` / ``Done`` events on an ``asyncio.Queue``, in
the order the engine produced them, in batches (a tuple per engine step: a request's last
tokens and its ``Done`` arrive together, as SGLang's last stream frame carries both).

One thread owns the engine: it runs queued commands between steps, then one ``poll`` over
every request in flight (continuous batching: concurrent HTTP requests share a batch). The
event loop never touches the engine; it sends commands (``_call``) and awaits their
futures. New requests wait at a gate while the server is paused (SGLang blocks
``/generate`` then) or while a weight swap waits for the engine to drain.

A prefix cache in the style of SGLang's radix cache, at chunk granularity: a request that
ended at its ``max_new_tokens`` leaves its KV parked in the engine, indexed by its whole
token sequence; a later request whose ``input_ids`` are exactly that sequence (the next
chunk of the same sample) resumes on that KV (``cached_tokens`` says how much).

Pause modes: ``abort`` aborts everything in flight (partial outputs returned); ``retract``
takes running requests out of the engine (KV dropped) and re-adds them on continue, where
they are recomputed and finish normally; ``in_place`` only stops stepping, so a weight swap
then lands under live requests and their ``weight_versions`` spans show it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import count
from typing import Any, Literal, TypeVar

import anyio
import structlog
import torch

from actors.generator import ChunkRequest, ChunkResult, StepResult
from actors.generator.builtin import TorchEngine
from actors.model import load_weights_into, read_weights
from pipeline.serve.events import Delta, Done, Event, Submission, Version, push_all
from pipeline.serve.paths import weights_path
from pipeline.serve.prefix_index import PrefixIndex
from pipeline.serve.protocol import GenerateSpec

log = structlog.get_logger()
T = TypeVar("T")
PauseMode = Literal["abort", "retract", "in_place"]
PAUSE_MODES: tuple[PauseMode, ...] = ("abort", "retract", "in_place")


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """What ``/v1/loads`` reports: KV of cached prefixes is evictable, not used."""

    num_running: int
    num_waiting: int  # in the engine's queue, at the gate, or retracted
    num_used_tokens: int
    num_cached_tokens: int
    max_total_tokens: int
    max_running: int
    num_generated_tokens: int  # since start-up
    num_input_tokens: int  # of every request added, and how many of them hit the cache
    num_input_cache_hits: int
    # the engine's totals (`EngineCounters`: steps, prefill, preemptions, parked hits and
    # evictions), which `/server_info` reports per rank as SGLang its scheduler's state
    counters: dict[str, int] = dataclasses.field(default_factory=dict)


class ServerBusyError(RuntimeError):
    """The operation needs an idle server (no request running or queued)."""


class ServerStoppedError(RuntimeError):
    """The engine thread has stopped (the server is shutting down): HTTP 503."""


class EngineBridge:
    def __init__(
        self, engine: TorchEngine, *, version: str = "default", step_delay_s: float = 0.0
    ) -> None:
        self.engine = engine
        self.step_delay_s = step_delay_s  # a latency knob for tests and fault drills
        self.version = version
        self.paused: PauseMode | None = None
        self._commands: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._live: dict[str, Submission] = {}  # engine id -> submission in the engine
        self._retracted: list[Submission] = []
        self._gated: dict[int, Submission] = {}  # waiting at the gate (event-loop side)
        self._prefixes = PrefixIndex()
        self._num_input_tokens = 0
        self._num_input_cache_hits = 0
        self._ids = count()
        self._stepping = True
        self.num_steps = 0
        self._stop = threading.Event()
        self._gate: asyncio.Event | None = None
        self._holds = 0  # weight swaps waiting for the engine to drain
        self._thread = threading.Thread(target=self._run, name="seer-serve-engine", daemon=True)

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            try:
                self._call_sync(self._abort_everything, "server shutting down")
            except Exception:  # a step that never ends: stop anyway
                log.exception("serve_stop_abort_failed")
            finally:
                self._stop.set()
            self._thread.join(timeout=30)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # ---- requests ------------------------------------------------------------------------
    async def submit(self, spec: GenerateSpec, stream: bool = False) -> Submission:
        """Queue ``spec`` (after the gate while paused); its events follow on ``.events``."""
        sub = Submission(spec, asyncio.Queue(), asyncio.get_running_loop(), stream)
        gate = self._gate_event()
        if not gate.is_set():
            key = id(sub)
            self._gated[key] = sub
            try:
                while not gate.is_set() and not sub.is_done:
                    await sub.wake.wait()
                    sub.wake.clear()
            finally:
                self._gated.pop(key, None)
            if sub.is_done:  # aborted at the gate
                return sub
        try:
            await self._call(lambda: self._add(sub))
        except asyncio.CancelledError:  # the add may still land: take it out again
            with anyio.CancelScope(shield=True):
                await self._call(lambda: self._abort_matching(lambda s: s is sub))
            raise
        return sub

    async def abort(self, rid: str, abort_all: bool = False) -> int:
        """Abort every request whose rid starts with ``rid`` (all with ``abort_all``);
        SGLang matches by prefix. How many were aborted."""
        if not rid and not abort_all:
            return 0
        hit = [s for s in self._gated.values() if abort_all or s.spec.rid.startswith(rid)]
        for sub in hit:
            sub.push(Done("abort", message="Abort in waiting queue", is_queued=True))
            sub.wake.set()
        matched = await self._call(
            lambda: self._abort_matching(lambda s: abort_all or s.spec.rid.startswith(rid))
        )
        return len(hit) + matched

    # ---- pause, continue, flush ------------------------------------------------------------
    async def pause(self, mode: PauseMode) -> None:
        self._gate_event().clear()
        self.paused = mode
        await self._call(lambda: self._pause(mode))

    async def resume(self) -> None:
        self.paused = None
        await self._call(self._resume)
        if not self._holds:
            self._open_gate()

    async def flush_cache(self, timeout_s: float | None) -> None:
        """Drop every cached prefix; ``ServerBusyError`` while requests are in flight
        (after waiting up to ``timeout_s`` for the server to go idle)."""
        if timeout_s is not None:
            await self._wait_idle(timeout_s)
        await self._call(self._flush)

    # ---- weights ---------------------------------------------------------------------------
    async def update_weights(
        self,
        path: str | Mapping[str, torch.Tensor],
        version: str | None,
        *,
        flush_cache: bool,
        abort_all: bool,
    ) -> tuple[bool, str]:
        """Load weights from ``path`` (a safetensors file or an HF folder), or tensors
        received by name (over the current weights: a distributed update may name only
        some). Unpaused, new
        requests wait and running ones finish first (SGLang's model-update lock); paused,
        the swap lands at once. ``(success, message)`` as SGLang reports them."""
        if abort_all:
            await self.abort("", abort_all=True)
        self._holds += 1
        self._gate_event().clear()
        try:
            while True:  # until paused (the swap lands under live requests) or idle
                need_idle = self.paused is None
                if not (need_idle and (self._live or self._retracted)):
                    swap = functools.partial(self._swap, path, version, flush_cache, need_idle)
                    result = await self._call(swap)
                    if result is not None:
                        return result
                await asyncio.sleep(0.005)
        finally:
            self._holds -= 1
            if not self._holds and self.paused is None:
                self._open_gate()

    async def set_version(self, version: str, abort_all: bool) -> None:
        if abort_all:
            await self.abort("", abort_all=True)
        await self._call(lambda: self._relabel(version))

    # ---- telemetry -------------------------------------------------------------------------
    async def load(self) -> ServerLoad:
        return await self._call(self._load_now)

    def _load_now(self) -> ServerLoad:
        load = self.engine.load()
        cached = self._prefixes.cached_tokens(load.num_parked)  # evictable, not used
        return ServerLoad(
            num_running=load.num_running,
            num_waiting=load.num_waiting + len(self._gated) + len(self._retracted),
            num_used_tokens=max(0, load.kv_tokens_used - cached),
            num_cached_tokens=cached,
            max_total_tokens=load.kv_tokens_total,
            max_running=load.max_running,
            num_generated_tokens=self.engine.counters().num_generated_tokens,
            num_input_tokens=self._num_input_tokens,
            num_input_cache_hits=self._num_input_cache_hits,
            counters=dataclasses.asdict(self.engine.counters()),
        )

    async def wait_unpaused(self, timeout_s: float) -> bool:
        """Whether the server is (or becomes) unpaused within ``timeout_s``."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.paused is not None:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def wait_for_step(self, timeout_s: float) -> bool | None:
        """With requests in the engine: whether it completes a step within ``timeout_s``.
        None when it has none (then only a request of one's own can tell)."""
        before = self.num_steps
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.num_steps == before:
            if not self._live:
                return None
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    # ---- event-loop helpers ----------------------------------------------------------------
    def _gate_event(self) -> asyncio.Event:
        if self._gate is None:
            self._gate = asyncio.Event()
            self._gate.set()
        return self._gate

    def _open_gate(self) -> None:
        self._gate_event().set()
        for sub in self._gated.values():
            sub.wake.set()

    async def _call(self, fn: Callable[[], T]) -> T:
        if self._stop.is_set() or not self._thread.is_alive():
            raise ServerStoppedError("the server is shutting down")
        future: Future[T] = Future()
        self._commands.put((fn, future))
        return await asyncio.wrap_future(future)

    def _call_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        future: Future[Any] = Future()
        self._commands.put((lambda: fn(*args), future))
        return future.result(timeout=30)

    async def _wait_idle(self, timeout_s: float | None) -> None:
        async def idle() -> None:
            while self._live or self._retracted:
                await asyncio.sleep(0.005)

        if timeout_s is None:
            await idle()
            return
        try:
            await asyncio.wait_for(idle(), timeout_s)
        except TimeoutError:
            raise ServerBusyError("Timed out waiting for idle state.") from None

    # ---- the engine thread -----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception as exc:  # a bug or a broken engine: end every request, go on
                log.exception("serve_engine_step_failed")
                self._abort_everything(f"engine error: {type(exc).__name__}: {exc}")
        while True:  # stopped: nothing queued after this point will run
            try:
                _, future = self._commands.get_nowait()
            except queue.Empty:
                return
            future.set_exception(ServerStoppedError("the server is shutting down"))

    def _turn(self) -> None:
        busy = self._stepping and self.engine.has_work()
        self._run_commands(block=not busy)
        if self._stepping and self.engine.has_work():
            self._deliver(self.engine.poll())
            self.num_steps += 1
            if self.step_delay_s:
                self._stop.wait(self.step_delay_s)

    def _run_commands(self, block: bool) -> None:
        try:
            item = self._commands.get(timeout=0.05) if block else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            fn, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)
            try:
                item = self._commands.get_nowait()
            except queue.Empty:
                return

    def _add(self, sub: Submission) -> None:
        spec = sub.spec
        if spec.max_new_tokens == 0:  # SGLang answers a prefill-only request at once
            sub.out.note_version(self.version)
            sub.push(Version(self.version), Done("length"))
            return
        engine_id = self._prefixes.take(spec.input_ids) or f"s{next(self._ids)}"
        request = ChunkRequest(engine_id, spec.input_ids, spec.max_new_tokens, params=spec.params)
        self.engine.add(request)  # EngineError: refused before anything changed
        sub.engine_id = engine_id
        self._live[engine_id] = sub
        sub.out.note_version(self.version)
        sub.push(Version(self.version))

    def _deliver(self, result: StepResult) -> None:
        events: dict[str, list[Event]] = {}
        for delta in result.deltas:
            out = self._live[delta.request_id].out
            out.token_ids.extend(delta.token_ids)
            out.logprobs.extend(delta.logprobs)
            events.setdefault(delta.request_id, []).append(Delta(delta.token_ids, delta.logprobs))
        for chunk in result.finished:
            sub = self._live[chunk.request_id]
            events.setdefault(chunk.request_id, []).append(self._finish(sub, chunk))
        push_all([(self._live[i], tuple(batch)) for i, batch in events.items()])
        for chunk in result.finished:
            del self._live[chunk.request_id]

    def _finish(self, sub: Submission, chunk: ChunkResult) -> Done:
        sub.num_cached_tokens += chunk.num_cached_tokens
        self._num_input_tokens += len(sub.spec.input_ids)
        self._num_input_cache_hits += chunk.num_cached_tokens
        if chunk.finish_reason == "chunk":  # its KV stays parked: index the sequence
            tokens = (*sub.spec.input_ids, *sub.generated)
            for engine_id in self._prefixes.put(tokens, chunk.request_id):
                self.engine.release(engine_id)
        if chunk.finish_reason == "stop":
            return self._done(sub, "stop", matched=sub.generated[-1])
        if chunk.finish_reason in ("chunk", "length"):
            return self._done(sub, "length")
        return self._done(sub, "abort", message=chunk.error or "aborted")

    def _done(self, sub: Submission, reason: str, **kw: Any) -> Done:
        return Done(
            reason,
            num_cached_tokens=sub.num_cached_tokens,
            num_retractions=sub.num_retractions,
            **kw,
        )

    def _abort_matching(self, match: Callable[[Submission], bool]) -> int:
        hits = [s for s in self._live.values() if match(s)]
        for sub in hits:
            del self._live[sub.engine_id]
            self.engine.abort(sub.engine_id)
            sub.push(self._abort_done(sub, "Abort requested by /abort_request"))
        held = [s for s in self._retracted if match(s)]
        self._retracted = [s for s in self._retracted if not match(s)]
        for sub in held:
            sub.push(self._abort_done(sub, "Abort requested by /abort_request"))
        return len(hits) + len(held)

    def _abort_done(self, sub: Submission, message: str) -> Done:
        if not sub.generated:
            return self._done(sub, "abort", message="Abort in waiting queue", is_queued=True)
        return self._done(sub, "abort", message=message)

    def _abort_everything(self, message: str) -> None:
        for sub in list(self._live.values()):
            self.engine.abort(sub.engine_id)
            sub.push(self._abort_done(sub, message))
        for sub in self._retracted:
            sub.push(self._abort_done(sub, message))
        self._live.clear()
        self._retracted.clear()

    def _pause(self, mode: PauseMode) -> None:
        self._stepping = False
        if mode == "abort":
            self._abort_everything("Abort on pause_generation")
        elif mode == "retract":
            for sub in list(self._live.values()):
                self.engine.abort(sub.engine_id)  # its KV is dropped, recomputed on continue
                sub.num_retractions += 1
                self._retracted.append(sub)
            self._live.clear()

    def _resume(self) -> None:
        for sub in self._retracted:
            spec = sub.spec
            left = spec.max_new_tokens - len(sub.generated)
            self.engine.add(
                ChunkRequest(
                    sub.engine_id,
                    spec.input_ids,
                    left,
                    generated_ids=tuple(sub.generated),
                    params=spec.params,
                )
            )
            self._live[sub.engine_id] = sub
        self._retracted.clear()
        self._stepping = True

    def _flush(self) -> None:
        if self._live or self._retracted:
            raise ServerBusyError("Cache not flushed because there are pending requests.")
        self._drop_prefixes()

    def _drop_prefixes(self) -> None:
        for engine_id in self._prefixes.clear():
            self.engine.release(engine_id)

    def _swap(
        self,
        path: str | Mapping[str, torch.Tensor],
        version: str | None,
        flush_cache: bool,
        need_idle: bool = False,
    ) -> tuple[bool, str] | None:
        live = [*self._live.values(), *self._retracted]
        if need_idle and live:
            return None  # a request slipped in: wait for it too
        try:
            if isinstance(path, str):
                state = read_weights(weights_path(path))
            else:
                state = {**self.engine.model.state_dict(), **path}
            self._load(state, busy=bool(self._live))
        except (OSError, ValueError, RuntimeError) as exc:
            return False, f"Failed to update weights: {type(exc).__name__}: {exc}"
        self._drop_prefixes()
        if version is not None:
            self._relabel(version)
        where = path if isinstance(path, str) else f"{len(path)} tensors"
        log.info("serve_weights_updated", source=where, version=self.version, live=len(live))
        if flush_cache and live:
            return False, (
                "Weights were updated, but the cache was not flushed because requests are "
                "still running or queued."
            )
        return True, "Succeeded to update model weights."

    def _load(self, state: Mapping[str, torch.Tensor], busy: bool) -> None:
        if busy:  # in-place pause: requests keep their KV, later tokens use the new weights
            load_weights_into(self.engine.model, state)
        else:
            self.engine.update_weights(state, self.engine.weight_version + 1)

    def _relabel(self, version: str) -> None:
        self.version = version
        for sub in [*self._live.values(), *self._retracted]:
            sub.out.note_version(version)
            sub.push(Version(version))
