"""The control and information routes of ``seer serve``, as SGLang 0.5.23 answers them.

``/abort_request`` (rid prefix), ``/pause_generation`` (``abort`` / ``retract`` /
``in_place``), ``/continue_generation``, ``/flush_cache[?timeout=S]``,
``/update_weights_from_disk``, ``/update_weight_version``, ``/model_info``, ``/server_info``,
``/v1/loads``, ``/health`` and ``/health_generate``, ``/ready``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from actors.generator import SamplingParams
from actors.generator.errors import EngineError
from pipeline.serve.bridge import PAUSE_MODES, EngineBridge, ServerBusyError
from pipeline.serve.events import Delta, Done
from pipeline.serve.generate import json_body
from pipeline.serve.info import API_VERSION, ServerInfo
from pipeline.serve.protocol import ContractError, GenerateSpec

log = structlog.get_logger()
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


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


class ControlRoutes:
    def __init__(self, bridge: EngineBridge, info: ServerInfo) -> None:
        self.bridge = bridge
        self.info = info
        self._throughput = _Rate()
        self._unhealthy = False  # SGLang's ServerStatus.UnHealthy: the last check timed out

    async def abort_request(self, request: Request) -> Response:
        body = await _json_object(request)
        rid = body.get("rid") or ""
        abort_all = bool(body.get("abort_all", False))
        if not isinstance(rid, str):
            return JSONResponse({"error": {"message": "rid must be a string"}}, status_code=400)
        if not rid and not abort_all:
            log.warning("serve_abort_ignored", reason="empty rid without abort_all")
        await self.bridge.abort(rid, abort_all)
        return Response(status_code=200)

    async def pause_generation(self, request: Request) -> Response:
        body = await _json_object(request)
        mode = body.get("mode", "abort")
        if mode not in PAUSE_MODES:
            message = f"mode must be one of {list(PAUSE_MODES)}, got {mode!r}"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        await self.bridge.pause(mode)
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(self, request: Request) -> Response:
        await _json_object(request)
        await self.bridge.resume()
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def flush_cache(self, request: Request) -> Response:
        raw = request.query_params.get("timeout")
        try:
            timeout = float(raw) if raw is not None else 0.0
        except ValueError:
            timeout = -1.0
        if not timeout >= 0:
            return PlainTextResponse(f"timeout must be a number >= 0, got {raw!r}", 400)
        try:  # as SGLang: 0 (the default) does not wait
            await self.bridge.flush_cache(timeout or None)
        except ServerBusyError as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return PlainTextResponse(
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n"
        )

    async def update_weights_from_disk(self, request: Request) -> Response:
        body = await _json_object(request)
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
        body = await _json_object(request)
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
                # as SGLang 0.5.23: the --context-length given (null when not), and the
                # scheduler's `max_req_input_len`; `max_context_length`: the context served
                "context_length": i.context_length,
                "max_req_input_len": i.max_req_input_len,
                "max_context_length": i.context_len,
                "max_total_num_tokens": i.kv_budget_tokens,
                "max_running_requests": i.max_batch,
                "max_prefill_tokens": i.max_prefill_tokens,
                "dp_size": 1,
                "tp_size": i.tp_size,
                "pp_size": 1,
                "skip_tokenizer_init": True,  # ids in, ids out: it serves no tokenizer
                "incremental_streaming_output": i.incremental_streaming_output,
                "disaggregation_mode": "null",
                "speculative_algorithm": None,
                "internal_states": [
                    {
                        "dp_rank": 0,
                        "num_running_reqs": load.num_running,
                        "num_waiting_reqs": load.num_waiting,
                        **load.counters,
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
        """As SGLang 0.5.23's one handler for both routes: a 1-token request that passes
        when the engine produces anything within the health-check timeout. While paused it
        waits at the pause like any ``/generate`` (SGLang's tokenizer manager blocks it
        there and nothing runs), so it answers 200 only if generation continues in time,
        else 503 when the timeout ends."""
        if not self.bridge.is_alive:
            return Response(status_code=503)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.info.health_check_timeout_s
        if not await self.bridge.wait_unpaused(self.info.health_check_timeout_s):
            log.warning("serve_health_paused", timeout_s=self.info.health_check_timeout_s)
            return self._health_result(False)
        # as SGLang: any output of the scheduler within the timeout passes, so a full batch
        # does not make a health request wait behind it
        progressed = await self.bridge.wait_for_step(max(deadline - loop.time(), 0.0))
        if progressed is not None:
            return self._health_result(progressed)
        spec = GenerateSpec(
            rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
            input_ids=(0,),
            max_new_tokens=1,
            params=SamplingParams(temperature=0.0, ignore_eos=True),
        )
        try:
            async with asyncio.timeout_at(deadline):
                sub = await self.bridge.submit(spec)
                while not any(isinstance(e, Delta | Done) for e in await sub.events.get()):
                    pass
        except (TimeoutError, EngineError):
            await self.bridge.abort(spec.rid)
            return self._health_result(False)
        return self._health_result(True)

    def _health_result(self, passed: bool) -> Response:
        """As SGLang: a failed check leaves the server unhealthy (`/ready` 503) until one
        passes."""
        self._unhealthy = not passed
        return Response(status_code=200 if passed else 503)

    async def ready(self, request: Request) -> Response:
        if self.bridge.paused is not None or not self.bridge.is_alive or self._unhealthy:
            return JSONResponse({"status": "not ready", "paused": self.bridge.paused}, 503)
        return JSONResponse({"status": "ready"})


def _update_result(success: bool, message: str) -> Response:
    body = {"success": success, "message": message, "num_paused_requests": 0}
    return JSONResponse(body, status_code=200 if success else 400)


def _replace_path(info: ServerInfo, path: str) -> ServerInfo:
    return replace(info, model_path=path)


async def _json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``); ``ContractError`` otherwise."""
    body = await json_body(request, default={})
    if not isinstance(body, dict):
        raise ContractError(f"invalid type: {type(body).__name__}, expected a map")
    return body
