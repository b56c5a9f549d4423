"""SGLang 0.5.23's distributed weight update on ``seer serve``, over a gloo group.

Routes (bodies as ``sglang/srt/managers/io_struct.py`` defines them; answers
``{"success", "message"}``, 400 when ``success`` is false):

- ``/init_weights_update_group`` ``{master_address, master_port, rank_offset, world_size,
  group_name="weight_update_group", backend="nccl"}``: this server's ranks join the group
  (``rank_offset + i`` for each of its ``tp_size`` ranks, as SGLang's TP ranks do; on a CPU
  the backend is gloo whatever is asked, since the tensors land in CPU memory);
- ``/destroy_weights_update_group`` ``{group_name}``;
- ``/begin_weight_update`` ``{selector}`` and ``/end_weight_update``: the session 0.5.23
  requires around a distributed update (a second begin, or an end without one, fails);
- ``/update_weights_from_distributed`` ``{names, dtypes, shapes, group_name, flush_cache,
  abort_all_requests, weight_version, load_format, selector, torch_empty_cache}``: receive
  each named tensor from rank 0's broadcast (HF names; ``model.`` is dropped to reach the
  built-in model's), then swap them in over the current weights as the disk route does
  (``EngineBridge.update_weights``: the weight version, the cache flush and its answer).
  Outside a session: ``success`` false, as SGLang answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
import torch
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from actors.generator.sglang.distributed import WeightGroup, WeightGroupError
from pipeline.serve.bridge import EngineBridge
from pipeline.serve.generate import json_body
from pipeline.serve.info import ServerInfo

log = structlog.get_logger()
DEFAULT_GROUP = "weight_update_group"


def internal_name(hf_name: str) -> str:
    """An HF parameter name as the built-in model's (``model.layers.0...`` ->
    ``layers.0...``; ``lm_head.weight`` stays)."""
    return hf_name.removeprefix("model.")


class WeightSyncRoutes:
    def __init__(self, bridge: EngineBridge, info: ServerInfo, timeout_s: float = 300.0) -> None:
        self.bridge = bridge
        self.info = info
        self.timeout_s = timeout_s
        self.groups: dict[str, list[WeightGroup]] = {}  # name -> this server's ranks in it
        self.session: str | None = None  # the selector of the open weight-update session

    async def init_weights_update_group(self, request: Request) -> Response:
        body = await _object(request)
        try:
            address = _field(body, "master_address", str)
            port = _field(body, "master_port", int)
            offset = _field(body, "rank_offset", int)
            world = _field(body, "world_size", int)
            name = _field(body, "group_name", str, DEFAULT_GROUP)
            _field(body, "backend", str, "nccl")
        except ValueError as exc:
            return _result(False, str(exc))
        if name in self.groups:
            return _result(False, f"Failed to initialize custom process group: {name!r} exists.")
        ranks = [offset + i for i in range(self.info.tp_size)]

        def join(rank: int) -> WeightGroup:
            return WeightGroup.open(
                master_address=address,
                master_port=port,
                rank=rank,
                world_size=world,
                group_name=name,
                backend="gloo",
                timeout_s=self.timeout_s,
            )

        try:
            joined = await asyncio.gather(*(asyncio.to_thread(join, r) for r in ranks))
        except WeightGroupError as exc:
            return _result(False, f"Failed to initialize custom process group: {exc}.")
        self.groups[name] = list(joined)
        log.info("serve_weight_group", group=name, ranks=ranks, world_size=world)
        return _result(True, "Succeeded to initialize custom process group.")

    async def destroy_weights_update_group(self, request: Request) -> Response:
        body = await _object(request)
        name = body.get("group_name", DEFAULT_GROUP)
        group = self.groups.pop(name, None) if isinstance(name, str) else None
        if group is None:
            return _result(False, "The group to be destroyed does not exist.")
        for rank in group:
            rank.close()
        return _result(True, "Succeeded to destroy custom process group.")

    async def begin_weight_update(self, request: Request) -> Response:
        body = await _object(request)
        selector = body.get("selector", "all")
        if selector not in ("target", "draft", "all"):
            return _result(False, f"selector must be target, draft or all, got {selector!r}")
        if self.session is not None:
            return _result(
                False,
                "a weight-update session is already open; call end_weight_update() first",
            )
        self.session = selector
        return _result(True, "Success")

    async def end_weight_update(self, request: Request) -> Response:
        await _object(request)
        if self.session is None:
            return _result(
                False, "no weight-update session is open; call begin_weight_update() first"
            )
        self.session = None
        return _result(True, "Success")

    async def update_weights_from_distributed(self, request: Request) -> Response:
        body = await _object(request)
        try:
            names = _list(body, "names", str)
            dtypes = _list(body, "dtypes", str)
            shapes = body.get("shapes")
            if not isinstance(shapes, list) or not all(
                isinstance(s, list) and all(isinstance(d, int) for d in s) for s in shapes
            ):
                raise ValueError("shapes must be a list of lists of ints")
            name = _field(body, "group_name", str, DEFAULT_GROUP)
            version = body.get("weight_version")
            if version is not None and not isinstance(version, str):
                raise ValueError("weight_version must be a string")
            if body.get("load_format") not in (None, "auto"):
                raise ValueError(f"load_format {body['load_format']!r} is not supported here")
        except ValueError as exc:
            return _result(False, str(exc))
        if self.session is None:
            return _result(
                False,
                "update_weights_from_distributed must run between begin_weight_update() and "
                "end_weight_update()",
            )
        group = self.groups.get(name)
        if group is None:
            return _result(
                False,
                f"Failed to receive weights: Group {name} not in {sorted(self.groups)}. "
                "Please call `init_weights_update_group` first.",
            )
        try:  # every rank of this server receives (SGLang's TP ranks each do)
            received = await asyncio.gather(
                *(asyncio.to_thread(rank.receive, names, dtypes, shapes) for rank in group)
            )
        except WeightGroupError as exc:
            return _result(False, f"Failed to receive weights: {exc}")
        state: dict[str, torch.Tensor] = {internal_name(k): v for k, v in received[0].items()}
        success, message = await self.bridge.update_weights(
            state,
            version,
            flush_cache=bool(body.get("flush_cache", True)),
            abort_all=bool(body.get("abort_all_requests", False)),
        )
        if success:
            message = "Succeeded to update parameter online."
        return _result(success, message)


def _result(success: bool, message: str) -> Response:
    return JSONResponse(
        {"success": success, "message": message}, status_code=200 if success else 400
    )


async def _object(request: Request) -> dict[str, Any]:
    body = await json_body(request, default={})
    return body if isinstance(body, dict) else {}


def _field(body: dict[str, Any], key: str, kind: type, default: Any = ...) -> Any:
    if key not in body:
        if default is ...:
            raise ValueError(f"{key} is required")
        return default
    value = body[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def _list(body: dict[str, Any], key: str, kind: type) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise ValueError(f"{key} must be a list of {kind.__name__}")
    return value
