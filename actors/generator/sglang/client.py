"""SGLangClient: one async HTTP client per server, its calls with typed errors.

Every call maps failures the same way: 502/503/504, a refused or reset connection and a
timeout raise `ServerLostError` (the server is not serving); any other non-2xx status
raises `ServerError` with the server's message; a 2xx body that is not JSON raises
`ServerError`. Control calls go to the server itself, never through a router; only
`/generate` may (`route_via`).

The HTTP client is aiohttp's (as SGLang's own clients use), one session and keep-alive
pool per server. httpx was measured first: its connection pool rescans every connection
for each request it queues or releases (and probes each idle socket), so with the 32
chunks a generator keeps in flight it spent about 5 ms of CPU per chunk in the generator
process, against under 1 ms with aiohttp (and the server's share per chunk fell from
about 4 to 2 ms, a cause not pinned down): CPU the servers' engines need on a small
machine. Idle pooled connections are closed after `KEEPALIVE_S`, before the server's own
keep-alive timeout (uvicorn's and so SGLang's: 5 s), so a request never goes out on a
connection the server is closing.

Keys: `api_key` goes as `Authorization: Bearer` on every call; `admin_api_key` replaces it
on SGLang's control routes (`ADMIN_ROUTES`: 0.5.23 marks them `ADMIN_OPTIONAL`, and a
server started with `--admin-api-key` accepts only that key there, never the plain one).

Weight updates run inside our own pause: `update_weights_from_disk` is pause (abort) ->
`/update_weights_from_disk` -> continue; `update_weights_from_distributed` is pause ->
`/begin_weight_update` -> `/update_weights_from_distributed` while the caller broadcasts
the tensors -> `/end_weight_update` -> continue (0.5.23 refuses a distributed update outside
a begin/end session). Both check `success` and then the version with `/model_info`.

`event_hooks` observe every exchange (tests, tools): `{"request": [f], "response": [g]}`,
awaited as `f(SentRequest)` before a request is sent and `g(ReceivedResponse)` once its
body has arrived; an exception raised there fails the call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import anyio

from actors.generator.errors import ServerError, ServerLostError
from actors.generator.sglang.protocol import ADMIN_ROUTES as ADMIN_ROUTES
from actors.generator.sglang.protocol import error_message, parse_version
from actors.generator.sglang.router import is_upstream_failure

LOST_STATUS = frozenset({502, 503, 504})
KEEPALIVE_S = 4.0  # below uvicorn's (SGLang's server's) 5 s keep-alive
USER_AGENT = "seer-rl (sglang backend)"


@dataclass(frozen=True, slots=True)
class SentRequest:
    method: str
    url: str  # absolute
    path: str
    content: bytes | None  # the JSON body, if any


@dataclass(frozen=True, slots=True)
class ReceivedResponse:
    request: SentRequest
    status_code: int
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


Hook = Callable[[Any], Awaitable[None]]


class SGLangClient:
    def __init__(
        self,
        url: str,
        *,
        api_key: str = "",
        admin_api_key: str = "",
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        max_connections: int = 512,
        event_hooks: Mapping[str, list[Hook]] | None = None,
    ) -> None:
        """Create it inside the event loop that uses it (aiohttp's session binds to it)."""
        self.url = url.rstrip("/")
        # our own pauses (weight updates): a health probe that overlaps one proves nothing
        self.num_pauses = 0  # begun so far
        self.is_paused = False  # one is under way (from before the pause until continued)
        self._generate_url = "/generate"  # or a router's, with the header that pins it here
        self._generate_headers: dict[str, str] = {}
        self._headers = {"User-Agent": USER_AGENT}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._admin_headers = dict(self._headers)
        if admin_api_key:
            self._admin_headers["Authorization"] = f"Bearer {admin_api_key}"
        self._connect_timeout_s = connect_timeout_s
        self._timeout = self._timeout_of(request_timeout_s)
        hooks = dict(event_hooks or {})
        self._on_request = list(hooks.get("request", ()))
        self._on_response = list(hooks.get("response", ()))
        connector = aiohttp.TCPConnector(
            limit=max_connections, limit_per_host=0, keepalive_timeout=KEEPALIVE_S
        )
        self.http = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, auto_decompress=False
        )

    def _timeout_of(self, total_s: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=total_s, sock_connect=self._connect_timeout_s)

    def route_via(self, router_url: str, headers: Mapping[str, str]) -> None:
        """Send `/generate` to `router_url` with `headers` (which pin it to this server)."""
        self._generate_url = f"{router_url.rstrip('/')}/generate"
        self._generate_headers = dict(headers)

    async def aclose(self) -> None:
        await self.http.close()

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """One request to `path` (on this server, or an absolute URL); the decoded JSON
        body (None for an empty one)."""
        content = json.dumps(body).encode() if body is not None else None
        base = self._admin_headers if path.partition("?")[0] in ADMIN_ROUTES else self._headers
        sent_headers = {**base, **(headers or {})}
        if content is not None:
            sent_headers["Content-Type"] = "application/json"
        where = path if "://" in path else f"{self.url}{path}"
        sent = SentRequest(method, where, path, content)
        for hook in self._on_request:
            await hook(sent)
        limit = self._timeout if timeout is None else self._timeout_of(timeout)
        try:
            async with self.http.request(
                method, where, data=content, headers=sent_headers, timeout=limit
            ) as resp:
                status, raw = resp.status, await resp.read()
        except TimeoutError as exc:  # asyncio's (aiohttp's timeouts derive from it)
            raise ServerLostError(f"{where}: no answer in time ({exc!r})") from None
        except (aiohttp.ClientError, OSError) as exc:  # refused, reset, closed, malformed
            raise ServerLostError(f"{where}: {type(exc).__name__}: {exc}") from None
        for response_hook in self._on_response:
            await response_hook(ReceivedResponse(sent, status, raw))
        routed = bool(self._generate_headers) and path == self._generate_url
        if status in LOST_STATUS or (routed and is_upstream_failure(status, raw)):
            raise ServerLostError(f"{where}: {error_message(status, raw)}")
        if not 200 <= status < 300:
            raise ServerError(f"{path}: {error_message(status, raw)}")
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            text = raw[:200].decode("utf-8", "replace")
            raise ServerError(f"{path}: the server answered with non-JSON {text!r}") from None

    async def generate(self, body: dict[str, Any]) -> Any:
        return await self.call("POST", self._generate_url, body, headers=self._generate_headers)

    async def abort(self, rid: str) -> None:
        await self.call("POST", "/abort_request", {"rid": rid})

    async def health_generate(self, timeout: float) -> None:
        await self.call("GET", "/health_generate", timeout=timeout)

    async def loads(self, timeout: float) -> Any:
        return await self.call("GET", "/v1/loads?include=core", timeout=timeout)

    async def router_workers(self, router_url: str, timeout: float) -> Any:
        """A router's `GET /workers` listing."""
        return await self.call("GET", f"{router_url.rstrip('/')}/workers", timeout=timeout)

    async def model_info(self, timeout: float) -> dict[str, Any]:
        info = await self.call("GET", "/model_info", timeout=timeout)
        if not isinstance(info, dict):
            raise ServerError(f"/model_info: expected an object, got {info!r}")
        return info

    async def server_info(self, timeout: float) -> dict[str, Any]:
        info = await self.call("GET", "/server_info", timeout=timeout)
        if not isinstance(info, dict):
            raise ServerError(f"/server_info: expected an object, got {info!r}")
        return info

    async def weight_version(self, timeout: float) -> int | None:
        return parse_version((await self.model_info(timeout)).get("weight_version"))

    async def set_weight_version(self, version: int) -> None:
        """Relabel without aborting (SGLang aborts everything unless told not to)."""
        body = {"new_version": str(version), "abort_all_requests": False}
        _check_success(
            "/update_weight_version", await self.call("POST", "/update_weight_version", body)
        )

    @asynccontextmanager
    async def _paused(self) -> AsyncIterator[None]:
        """pause (abort) ... continue; `is_paused` holds throughout."""
        self.num_pauses += 1
        self.is_paused = True
        try:
            await self.call("POST", "/pause_generation", {"mode": "abort"})
            try:
                yield
            finally:
                await self.call("POST", "/continue_generation", {})
        finally:
            self.is_paused = False

    async def _verify_version(self, version: int) -> None:
        held = await self.weight_version(timeout=30.0)
        if held != version:
            raise ServerError(
                f"/model_info reports weight version {held} after updating to {version}"
            )

    async def update_weights_from_disk(self, model_path: str, version: int) -> None:
        """pause (abort) -> update_weights_from_disk -> continue; `success` checked, and
        the version verified with `/model_info`."""
        async with self._paused():
            body = {"model_path": model_path, "weight_version": str(version), "flush_cache": True}
            reply = await self.call("POST", "/update_weights_from_disk", body)
            _check_success("/update_weights_from_disk", reply)
        await self._verify_version(version)

    async def init_weights_update_group(
        self,
        *,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        group_name: str,
        backend: str,
        timeout: float,
    ) -> None:
        """The server's ranks join the group (the caller joins as rank 0 meanwhile)."""
        body = {
            "master_address": master_address,
            "master_port": master_port,
            "rank_offset": rank_offset,
            "world_size": world_size,
            "group_name": group_name,
            "backend": backend,
        }
        reply = await self.call("POST", "/init_weights_update_group", body, timeout=timeout)
        _check_success("/init_weights_update_group", reply)

    async def destroy_weights_update_group(self, group_name: str, timeout: float) -> None:
        body = {"group_name": group_name}
        reply = await self.call("POST", "/destroy_weights_update_group", body, timeout=timeout)
        _check_success("/destroy_weights_update_group", reply)

    async def update_weights_from_distributed(
        self,
        meta: Mapping[str, Any],
        version: int,
        broadcast: Callable[[], Awaitable[None]],
        *,
        group_name: str,
        timeout: float,
    ) -> None:
        """pause -> begin_weight_update -> update_weights_from_distributed (`meta`: names,
        dtypes, shapes) while `broadcast()` sends the tensors -> end_weight_update ->
        continue; `success` checked at each step, the version verified."""
        body = {
            **meta,
            "group_name": group_name,
            "flush_cache": True,
            "weight_version": str(version),
        }
        async with self._paused():
            _check_success(
                "/begin_weight_update", await self.call("POST", "/begin_weight_update", {})
            )
            try:
                async with anyio.create_task_group() as tg:

                    async def update() -> None:
                        path = "/update_weights_from_distributed"
                        _check_success(path, await self.call("POST", path, body, timeout=timeout))

                    tg.start_soon(update)
                    await broadcast()
            finally:
                reply = await self.call("POST", "/end_weight_update", {})
                _check_success("/end_weight_update", reply)
        await self._verify_version(version)


def _check_success(path: str, reply: Any) -> None:
    if reply is None:  # some versions answer 200 with an empty body
        return
    if not isinstance(reply, dict) or reply.get("success") is False:
        message = reply.get("message") if isinstance(reply, dict) else reply
        raise ServerError(f"{path} failed: {message}")
