"""SGLangClient: one async HTTP client per server, its calls with typed errors.

Every call maps failures the same way: 502/503/504, a refused or reset connection and a
timeout raise `ServerLostError` (the server is not serving); any other non-2xx status
raises `ServerError` with the server's message; a 2xx body that is not JSON raises
`ServerError`. Control calls go to the server itself, never through a router; only
`/generate` may (`route_via`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from actors.generator.errors import ServerError, ServerLostError
from actors.generator.sglang.protocol import error_message, parse_version
from actors.generator.sglang.router import is_upstream_failure

LOST_STATUS = frozenset({502, 503, 504})


class SGLangClient:
    def __init__(
        self,
        url: str,
        *,
        api_key: str = "",
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        max_connections: int = 512,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
    ) -> None:
        self.url = url
        # our own pauses (weight updates): a health probe that overlaps one proves nothing
        self.num_pauses = 0  # begun so far
        self.is_paused = False  # one is under way (from before the pause until continued)
        self._generate_url = "/generate"  # or a router's, with the header that pins it here
        self._generate_headers: dict[str, str] = {}
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            base_url=url,
            headers=headers,
            timeout=httpx.Timeout(request_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            event_hooks=dict(event_hooks or {}),
        )

    def route_via(self, router_url: str, headers: Mapping[str, str]) -> None:
        """Send `/generate` to `router_url` with `headers` (which pin it to this server)."""
        self._generate_url = f"{router_url.rstrip('/')}/generate"
        self._generate_headers = dict(headers)

    async def aclose(self) -> None:
        await self.http.aclose()

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
        headers = dict(headers or {})
        if content is not None:
            headers["Content-Type"] = "application/json"
        extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        where = path if "://" in path else f"{self.url}{path}"
        try:
            resp = await self.http.request(method, path, content=content, headers=headers, **extra)
        except httpx.TimeoutException as exc:
            raise ServerLostError(f"{where}: no answer in time ({exc!r})") from None
        except httpx.TransportError as exc:
            raise ServerLostError(f"{where}: {type(exc).__name__}: {exc}") from None
        routed = bool(self._generate_headers) and path == self._generate_url
        if resp.status_code in LOST_STATUS or (
            routed and is_upstream_failure(resp.status_code, resp.content)
        ):
            raise ServerLostError(
                f"{where}: {error_message(resp.status_code, resp.content)}"
            )
        if not 200 <= resp.status_code < 300:
            raise ServerError(f"{path}: {error_message(resp.status_code, resp.content)}")
        if not resp.content:
            return None
        try:
            return json.loads(resp.content)
        except ValueError:
            text = resp.content[:200].decode("utf-8", "replace")
            raise ServerError(f"{path}: the server answered with non-JSON {text!r}") from None

    async def generate(self, body: dict[str, Any]) -> Any:
        return await self.call(
            "POST", self._generate_url, body, headers=self._generate_headers
        )

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

    async def update_weights_from_disk(self, model_path: str, version: int) -> None:
        """pause (abort) -> update_weights_from_disk -> continue; `success` checked, and
        the version verified with `/model_info`. `is_paused` holds throughout."""
        self.num_pauses += 1
        self.is_paused = True
        try:
            await self.call("POST", "/pause_generation", {"mode": "abort"})
            try:
                body = {
                    "model_path": model_path,
                    "weight_version": str(version),
                    "flush_cache": True,
                }
                reply = await self.call("POST", "/update_weights_from_disk", body)
                _check_success("/update_weights_from_disk", reply)
            finally:
                await self.call("POST", "/continue_generation", {})
        finally:
            self.is_paused = False
        held = await self.weight_version(timeout=30.0)
        if held != version:
            raise ServerError(
                f"/model_info reports weight version {held} after updating to {version}"
            )


def _check_success(path: str, reply: Any) -> None:
    if reply is None:  # some versions answer 200 with an empty body
        return
    if not isinstance(reply, dict) or reply.get("success") is False:
        message = reply.get("message") if isinstance(reply, dict) else reply
        raise ServerError(f"{path} failed: {message}")
