"""The ASGI app of ``seer serve``: SGLang 0.5.23's HTTP API over an ``EngineBridge``.

Routes, shapes and status codes follow ../shared/SGLANG.md (section 4): ``/generate``
(JSON or SSE ``data: {...}`` frames with cumulative output, then ``data: [DONE]``),
``/abort_request`` (rid prefix), ``/pause_generation`` (``abort`` / ``retract`` /
``in_place``), ``/continue_generation``, ``/flush_cache[?timeout=S]``,
``/update_weights_from_disk``, ``/update_weight_version``, ``/model_info`` (and
``/get_model_info``), ``/server_info`` (and ``/get_server_info``), ``/v1/loads``,
``/health``, ``/health_generate``, ``/ready``. A streaming client that disconnects has its
request aborted. Not implemented: text input (no tokenizer), input or top logprobs, the
other weight-update routes (tensor, distributed, IPC), LoRA, sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from actors.generator import SamplingParams
from actors.generator.errors import EngineError
from actors.model import ByteTokenizer
from pipeline.serve.bridge import (
    PAUSE_MODES,
    Delta,
    Done,
    EngineBridge,
    ServerBusyError,
    ServerStoppedError,
    Submission,
    Version,
)
from pipeline.serve.protocol import (
    ContractError,
    GenerateSpec,
    Output,
    RequestError,
    abort_reason,
    error_body,
    length_reason,
    parse_generate,
    response_json,
    stop_reason,
)

log = structlog.get_logger()
API_VERSION = "0.5.23"  # the SGLang release whose API this server speaks
HEALTH_TIMEOUT_S = 20.0
DISCONNECT_POLL_S = 0.25
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


@dataclass(frozen=True, slots=True)
class ServerInfo:
    model_path: str
    host: str
    port: int
    context_len: int
    vocab_size: int
    max_batch: int
    kv_budget_tokens: int
    max_prefill_tokens: int
    eos_token_id: int | None
    kv_bytes_per_token: int = 0
    weight_bytes: int = 0


def build_app(bridge: EngineBridge, info: ServerInfo) -> Starlette:
    server = _Server(bridge, info)
    routes = [
        Route("/generate", server.generate, methods=["POST", "PUT"]),
        Route("/abort_request", server.abort_request, methods=["POST"]),
        Route("/pause_generation", server.pause_generation, methods=["POST"]),
        Route("/continue_generation", server.continue_generation, methods=["POST"]),
        Route("/flush_cache", server.flush_cache, methods=["GET", "POST"]),
        Route("/update_weights_from_disk", server.update_weights_from_disk, methods=["POST"]),
        Route("/update_weight_version", server.update_weight_version, methods=["POST"]),
        Route("/model_info", server.model_info, methods=["GET"]),
        Route("/get_model_info", server.model_info, methods=["GET"]),
        Route("/server_info", server.server_info, methods=["GET"]),
        Route("/get_server_info", server.server_info, methods=["GET"]),
        Route("/v1/loads", server.loads, methods=["GET"]),
        Route("/health", server.health, methods=["GET"]),
        Route("/health_generate", server.health, methods=["GET"]),
        Route("/ready", server.ready, methods=["GET"]),
    ]
    handlers = {ContractError: _contract_error, ServerStoppedError: _stopped}
    return Starlette(routes=routes, exception_handlers=handlers)


async def _stopped(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": {"message": str(exc)}}, status_code=503)


async def _contract_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ContractError)
    return JSONResponse(error_body(exc), status_code=400)


class _Rate:
    """Tokens per second between two successive readings of a monotonic counter."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None
        self._rate = 0.0

    def update(self, now: float, total: int) -> float:
        if self._last is not None and now > self._last[0]:
            self._rate = (total - self._last[1]) / (now - self._last[0])
        self._last = (now, total)
        return self._rate


class _Server:
    def __init__(self, bridge: EngineBridge, info: ServerInfo) -> None:
        self.bridge = bridge
        self.info = info
        self._throughput = _Rate()
        self.tokenizer = ByteTokenizer() if info.vocab_size == 259 else None

    # ---- /generate -----------------------------------------------------------------------
    async def generate(self, request: Request) -> Response:
        start = time.perf_counter()
        try:
            body = await _json_body(request)
            specs, is_batch, stream = parse_generate(
                body, context_len=self.info.context_len, vocab_size=self.info.vocab_size
            )
        except ContractError as exc:  # SGLang's contract gate: 400, streaming or not
            return JSONResponse(error_body(exc), status_code=400)
        except RequestError as exc:  # SGLang's validation: in the stream when streaming
            if body.get("stream") is True:
                frames = _error_stream(str(exc))
                return StreamingResponse(frames, media_type="text/event-stream")
            return JSONResponse(error_body(exc), status_code=400)
        if stream:
            frames = self._stream(request, specs, is_batch, start)
            return StreamingResponse(frames, media_type="text/event-stream")
        work = asyncio.ensure_future(asyncio.gather(*(self._run_one(s, start) for s in specs)))
        while not work.done():  # a client that hangs up has its requests aborted
            await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
            if not work.done() and await request.is_disconnected():
                log.info("serve_client_disconnected", rids=[s.rid for s in specs])
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError, EngineError):
                    await work
                return Response(status_code=499)
        try:
            outs = work.result()
        except EngineError as exc:
            return JSONResponse(error_body(RequestError(str(exc))), status_code=400)
        return JSONResponse(outs if is_batch else outs[0])

    async def _run_one(self, spec: GenerateSpec, start: float) -> dict[str, Any]:
        sub = await self.bridge.submit(spec)
        out = sub.out  # the engine thread's to write until Done arrives
        try:
            while out.finish_reason is None:
                for event in await sub.events.get():
                    if isinstance(event, Done):
                        self._apply(spec, out, event)
        finally:
            if not sub.is_done:  # cancelled (client gone): free the engine
                with anyio.CancelScope(shield=True):
                    await self.bridge.abort(spec.rid)
        return self._response(spec, out, start)

    async def _stream(
        self, request: Request, specs: list[GenerateSpec], is_batch: bool, start: float
    ) -> AsyncIterator[bytes]:
        merged: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        subs: list[Submission] = []
        # uvicorn drops frames sent to a client that hung up without telling the app: watch
        watcher = asyncio.ensure_future(_watch_disconnect(request, merged))
        try:
            for i, spec in enumerate(specs):
                try:
                    sub = await self.bridge.submit(spec, stream=True)
                except EngineError as exc:
                    yield _frame(_stream_error(str(exc), i if is_batch else None))
                    continue
                subs.append(sub)
                asyncio.get_running_loop().create_task(_forward(i, sub, merged))
            outs = {i: Output() for i in range(len(specs))}
            open_ = len(subs)
            while open_:
                i, events = await merged.get()
                if i < 0:
                    log.info("serve_client_disconnected", rids=[s.rid for s in specs])
                    return
                out = outs[i]
                for event in events:
                    self._apply(specs[i], out, event)
                if any(isinstance(e, Delta | Done) for e in events):
                    index = i if is_batch else None
                    yield _frame(self._response(specs[i], out, start, index))
                if out.finish_reason is not None:
                    open_ -= 1
            yield b"data: [DONE]\n\n"
        finally:
            watcher.cancel()
            with anyio.CancelScope(shield=True):  # Starlette cancels us on a disconnect
                for sub in subs:
                    if not sub.is_done:  # the client went away mid-stream
                        await self.bridge.abort(sub.spec.rid)

    def _apply(self, spec: GenerateSpec, out: Output, event: Any) -> None:
        if isinstance(event, Version):
            out.note_version(event.version)
        elif isinstance(event, Delta):
            out.token_ids.extend(event.token_ids)
            out.logprobs.extend(event.logprobs)
        elif isinstance(event, Done):
            out.num_cached_tokens = event.num_cached_tokens
            out.num_retractions = event.num_retractions
            out.is_queued_abort = event.is_queued
            if not out.spans:
                out.note_version(self.bridge.version)
            if event.reason == "stop":
                out.finish_reason = stop_reason(event.matched if event.matched is not None else -1)
            elif event.reason == "length":
                out.finish_reason = length_reason(spec.max_new_tokens)
            else:
                out.finish_reason = abort_reason(event.message, is_queued=event.is_queued)

    def _response(
        self, spec: GenerateSpec, out: Output, start: float, index: int | None = None
    ) -> dict[str, Any]:
        latency = time.perf_counter() - start
        return response_json(spec, out, latency_s=latency, tokenizer=self.tokenizer, index=index)

    # ---- control -------------------------------------------------------------------------
    async def abort_request(self, request: Request) -> Response:
        body = await _json_body(request, default={})
        rid = body.get("rid") or ""
        abort_all = bool(body.get("abort_all", False))
        if not isinstance(rid, str):
            return JSONResponse({"error": {"message": "rid must be a string"}}, status_code=400)
        if not rid and not abort_all:
            log.warning("serve_abort_ignored", reason="empty rid without abort_all")
        await self.bridge.abort(rid, abort_all)
        return Response(status_code=200)

    async def pause_generation(self, request: Request) -> Response:
        body = await _json_body(request, default={})
        mode = body.get("mode", "abort")
        if mode not in PAUSE_MODES:
            message = f"mode must be one of {list(PAUSE_MODES)}, got {mode!r}"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        await self.bridge.pause(mode)
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: Request) -> Response:
        await _json_body(request, default={})
        await self.bridge.resume()
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def flush_cache(self, request: Request) -> Response:
        raw = request.query_params.get("timeout")
        try:
            timeout = float(raw) if raw is not None else None
        except ValueError:
            return PlainTextResponse(f"timeout must be a number, got {raw!r}", status_code=400)
        try:
            await self.bridge.flush_cache(timeout)
        except ServerBusyError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n"
        )

    async def update_weights_from_disk(self, request: Request) -> Response:
        body = await _json_body(request, default={})
        path = body.get("model_path")
        version = body.get("weight_version")
        if not isinstance(path, str) or not path:
            return _update_result(False, "model_path (a string) is required")
        if version is not None and not isinstance(version, str):
            return _update_result(False, "weight_version must be a string")
        success, message = await self.bridge.update_weights(
            path,
            version,
            flush_cache=bool(body.get("flush_cache", True)),
            abort_all=bool(body.get("abort_all_requests", False)),
        )
        if success:
            self.info = _replace_path(self.info, path)
        return _update_result(success, message)

    async def update_weight_version(self, request: Request) -> Response:
        body = await _json_body(request, default={})
        version = body.get("new_version")
        if not isinstance(version, str) or not version:
            return JSONResponse(
                {"success": False, "message": "new_version (a string) is required"},
                status_code=400,
            )
        await self.bridge.set_version(version, bool(body.get("abort_all_requests", True)))
        message = f"Weight version updated to {version}"
        return JSONResponse({"success": True, "message": message, "new_version": version})

    # ---- information -----------------------------------------------------------------------
    async def model_info(self, request: Request) -> Response:
        return JSONResponse(
            {
                "model_path": self.info.model_path,
                "served_model_name": self.info.model_path or "seer-default",
                "tokenizer_path": self.info.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.bridge.version,
                "load_format": "auto",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
            }
        )

    async def server_info(self, request: Request) -> Response:
        load = await self.bridge.load()
        i = self.info
        return JSONResponse(
            {
                "model_path": i.model_path,
                "served_model_name": i.model_path or "seer-default",
                "tokenizer_path": i.model_path,
                "host": i.host,
                "port": i.port,
                "context_length": i.context_len,
                "max_context_length": i.context_len,
                "max_total_num_tokens": i.kv_budget_tokens,
                "max_running_requests": i.max_batch,
                "max_prefill_tokens": i.max_prefill_tokens,
                "dp_size": 1,
                "tp_size": 1,
                "incremental_streaming_output": False,
                "disaggregation_mode": "null",
                "speculative_algorithm": None,
                "internal_states": [
                    {
                        "dp_rank": 0,
                        "num_running_reqs": load.num_running,
                        "num_waiting_reqs": load.num_waiting,
                    }
                ],
                "version": API_VERSION,
                "frontend": "python",
                "server": "seer serve (the built-in engine behind SGLang's HTTP API)",
            }
        )

    async def loads(self, request: Request) -> Response:
        """SGLang's per-rank ``LoadSnapshot`` fields (one rank); ``include`` defaults to all."""
        raw = request.query_params.get("include")
        include = {part.strip() for part in raw.split(",")} if raw else {"all"}
        unknown = sorted(include - LOAD_SECTIONS)
        if unknown:  # FastAPI's HTTPException shape, as SGLang answers
            message = f"Invalid include sections: {unknown}. Valid options: {sorted(LOAD_SECTIONS)}"
            return JSONResponse({"detail": message}, status_code=400)
        load = await self.bridge.load()
        used, total = load.num_used_tokens, load.max_total_tokens
        now = time.monotonic()
        gen_rate = self._throughput.update(now, load.num_generated_tokens)
        entry: dict[str, Any] = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": load.num_running,
            "num_waiting_reqs": load.num_waiting,
            "num_used_tokens": used,
            "num_total_tokens": used + load.num_cached_tokens,
            "num_active_tokens": used + load.num_cached_tokens,
            "max_total_num_tokens": total,
            "max_running_requests": load.max_running,
            "token_usage": used / total if total else 0.0,
            "gen_throughput": gen_rate,
            "cache_hit_rate": (
                load.num_input_cache_hits / load.num_input_tokens if load.num_input_tokens else 0.0
            ),
            "utilization": load.num_running / load.max_running if load.max_running else 0.0,
        }
        if include & {"memory", "all"}:
            kv_gb = total * self.info.kv_bytes_per_token / 1e9
            entry["memory"] = {
                "weight_gb": self.info.weight_bytes / 1e9,
                "kv_cache_gb": kv_gb,
                "graph_gb": 0.0,
                "token_capacity": total,
            }
        return JSONResponse(
            {
                "timestamp": datetime.now(UTC).isoformat(),
                "version": API_VERSION,
                "accelerator": "cpu",
                "num_accelerators": 1,
                "loads": [entry],
            }
        )

    async def health(self, request: Request) -> Response:
        if not self.bridge.is_alive:
            return Response(status_code=503)
        if self.bridge.paused is not None:  # the engine is held on purpose; its thread lives
            return Response(status_code=200)
        # as SGLang: any output of the scheduler within the timeout passes, so a full batch
        # does not make a health request wait behind it
        progressed = await self.bridge.wait_for_step(HEALTH_TIMEOUT_S)
        if progressed is not None:
            return Response(status_code=200 if progressed else 503)
        spec = GenerateSpec(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
            input_ids=(0,),
            max_new_tokens=1,
            params=SamplingParams(temperature=0.0, ignore_eos=True),
        )
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                sub = await self.bridge.submit(spec)
                while not any(isinstance(e, Delta | Done) for e in await sub.events.get()):
                    pass
        except (TimeoutError, EngineError):
            await self.bridge.abort(spec.rid)
            return Response(status_code=503)
        return Response(status_code=200)

    async def ready(self, request: Request) -> Response:
        if self.bridge.paused is not None or not self.bridge.is_alive:
            return JSONResponse({"status": "not ready", "paused": self.bridge.paused}, 503)
        return JSONResponse({"status": "ready"})


async def _watch_disconnect(request: Request, merged: asyncio.Queue[tuple[int, Any]]) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)
    merged.put_nowait((-1, ()))


async def _forward(index: int, sub: Submission, merged: asyncio.Queue[tuple[int, Any]]) -> None:
    while True:
        events = await sub.events.get()
        merged.put_nowait((index, events))
        if any(isinstance(e, Done) for e in events):
            return


async def _json_body(request: Request, default: Any = None) -> Any:
    raw = await request.body()
    if not raw.strip():
        if default is not None:
            return default
        raise ContractError("EOF while parsing a value: the body is empty")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ContractError(f"invalid JSON: {exc}") from None


def _frame(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _error_stream(message: str) -> AsyncIterator[bytes]:
    yield _frame(_stream_error(message, None))
    yield b"data: [DONE]\n\n"


def _stream_error(message: str, index: int | None) -> dict[str, Any]:
    error = {"message": message, "type": "invalid_request_error", "code": 400}
    error["retryable"] = False
    return {"error": error} if index is None else {"error": error, "index": index}


def _update_result(success: bool, message: str) -> Response:
    body = {"success": success, "message": message, "num_paused_requests": 0}
    return JSONResponse(body, status_code=200 if success else 400)


def _replace_path(info: ServerInfo, path: str) -> ServerInfo:
    from dataclasses import replace

    return replace(info, model_path=path)
