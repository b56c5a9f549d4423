"""``/generate``: SGLang 0.5.23's generate route over an ``EngineBridge``.

A JSON body (one request or a batch) becomes ``GenerateSpec``s (``protocol.py``), each an
engine request. Non-streaming: one JSON object (a list for a batch) once every request is
done. Streaming: SSE ``data: {...}`` frames with cumulative output (one per engine step, the
last with ``finish_reason``; only the new tokens with ``incremental_streaming_output``, as
SGLang's flag of that name), then ``data: [DONE]``; a validation error is an error frame.
A client that hangs up has its requests aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from actors.generator.errors import EngineError
from actors.model import ByteTokenizer
from pipeline.serve.bridge import EngineBridge
from pipeline.serve.events import Delta, Done, Submission, Version
from pipeline.serve.info import ServerInfo
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
DISCONNECT_POLL_S = 0.25


class GenerateRoute:
    def __init__(self, bridge: EngineBridge, info: ServerInfo) -> None:
        self.bridge = bridge
        self.info = info
        self.tokenizer = ByteTokenizer() if info.vocab_size == 259 else None
        self._live_rids: set[str] = set()

    async def generate(self, request: Request) -> Response:
        start = time.perf_counter()
        try:
            body = await json_body(request)
            specs, is_batch, stream = parse_generate(
                body,
                context_len=self.info.context_len,
                vocab_size=self.info.vocab_size,
                max_input_len=self.info.max_req_input_len,
            )
            for spec in specs:  # SGLang refuses a rid that is still in flight
                if spec.rid in self._live_rids:
                    raise RequestError(f"Duplicate request ID detected: {spec.rid}")
        except ContractError as exc:  # SGLang's contract gate: 400, streaming or not
            return JSONResponse(error_body(exc), status_code=400)
        except RequestError as exc:  # SGLang's validation: in the stream when streaming
            if body.get("stream") is True:
                frames = _error_stream(str(exc))
                return StreamingResponse(frames, media_type="text/event-stream")
            return JSONResponse(error_body(exc), status_code=400)
        self._live_rids.update(s.rid for s in specs)
        if stream:
            frames = self._stream(request, specs, is_batch, start)
            return StreamingResponse(frames, media_type="text/event-stream")
        try:
            return await self._respond(request, specs, is_batch, start)
        finally:
            self._live_rids.difference_update(s.rid for s in specs)

    async def _respond(
        self, request: Request, specs: list[GenerateSpec], is_batch: bool, start: float
    ) -> Response:
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
            sent = dict.fromkeys(outs, 0)  # tokens already streamed, per request
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
                    since = sent[i] if self.info.incremental_streaming_output else 0
                    yield _frame(self._response(specs[i], out, start, index, since))
                    sent[i] = len(out.token_ids)
                if out.finish_reason is not None:
                    open_ -= 1
            yield b"data: [DONE]\n\n"
        finally:
            self._live_rids.difference_update(s.rid for s in specs)
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
        self,
        spec: GenerateSpec,
        out: Output,
        start: float,
        index: int | None = None,
        since: int = 0,
    ) -> dict[str, Any]:
        latency = time.perf_counter() - start
        return response_json(
            spec, out, latency_s=latency, tokenizer=self.tokenizer, index=index, since=since
        )


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


async def json_body(request: Request, default: Any = None) -> Any:
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
