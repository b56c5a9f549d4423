"""The ASGI app of ``seer serve``: SGLang 0.5.23's HTTP API over an ``EngineBridge``.

Routes, shapes and status codes follow ../shared/SGLANG.md (section 4): ``/generate``
(JSON or SSE ``data: {...}`` frames with cumulative output, then ``data: [DONE]``),
``/abort_request`` (rid prefix), ``/pause_generation`` (``abort`` / ``retract`` /
``in_place``), ``/continue_generation``, ``/flush_cache[?timeout=S]``,
``/update_weights_from_disk``, ``/update_weight_version``, the distributed weight update
(``/init_weights_update_group``, ``/destroy_weights_update_group``, ``/begin_weight_update``,
``/end_weight_update``, ``/update_weights_from_distributed``: ``weight_sync.py``, over gloo),
``/model_info`` (and
``/get_model_info``), ``/server_info`` (and ``/get_server_info``), ``/v1/loads``,
``/health``, ``/health_generate``, ``/ready``. A streaming client that disconnects has its
request aborted. Not implemented: text input (no tokenizer), input or top logprobs, the
other weight-update routes (tensor, IPC), LoRA, sessions.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pipeline.serve.bridge import EngineBridge, ServerStoppedError
from pipeline.serve.control import ControlRoutes
from pipeline.serve.generate import GenerateRoute
from pipeline.serve.info import ServerInfo
from pipeline.serve.protocol import ContractError, error_body
from pipeline.serve.weight_sync import WeightSyncRoutes

__all__ = ["ServerInfo", "build_app"]


def build_app(bridge: EngineBridge, info: ServerInfo) -> Starlette:
    gen, ctl = GenerateRoute(bridge, info), ControlRoutes(bridge, info)
    dist = WeightSyncRoutes(bridge, info)
    routes = [
        Route("/generate", gen.generate, methods=["POST", "PUT"]),
        Route("/abort_request", ctl.abort_request, methods=["POST"]),
        Route("/pause_generation", ctl.pause_generation, methods=["POST"]),
        Route("/continue_generation", ctl.continue_generation, methods=["POST"]),
        Route("/flush_cache", ctl.flush_cache, methods=["GET", "POST"]),
        Route("/update_weights_from_disk", ctl.update_weights_from_disk, methods=["POST"]),
        Route("/update_weight_version", ctl.update_weight_version, methods=["POST"]),
        Route("/init_weights_update_group", dist.init_weights_update_group, methods=["POST"]),
        Route("/destroy_weights_update_group", dist.destroy_weights_update_group, methods=["POST"]),
        Route("/begin_weight_update", dist.begin_weight_update, methods=["POST"]),
        Route("/end_weight_update", dist.end_weight_update, methods=["POST"]),
        Route(
            "/update_weights_from_distributed",
            dist.update_weights_from_distributed,
            methods=["POST"],
        ),
        Route("/model_info", ctl.model_info, methods=["GET"]),
        Route("/get_model_info", ctl.model_info, methods=["GET"]),
        Route("/server_info", ctl.server_info, methods=["GET"]),
        Route("/get_server_info", ctl.server_info, methods=["GET"]),
        Route("/v1/loads", ctl.loads, methods=["GET"]),
        Route("/health", ctl.health, methods=["GET"]),
        Route("/health_generate", ctl.health, methods=["GET"]),
        Route("/ready", ctl.ready, methods=["GET"]),
    ]
    handlers = {ContractError: _contract_error, ServerStoppedError: _stopped}
    return Starlette(routes=routes, exception_handlers=handlers)


async def _stopped(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": {"message": str(exc)}}, status_code=503)


async def _contract_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ContractError)
    return JSONResponse(error_body(exc), status_code=400)
