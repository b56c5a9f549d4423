"""The SGLang backend's HTTP client over real HTTP (uvicorn on 127.0.0.1): keep-alive
connections the server has closed are not reused (no call fails as a lost server), and
the exchange hooks see each request and response."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from actors.generator.sglang.client import USER_AGENT, ReceivedResponse, SentRequest, SGLangClient

pytestmark = pytest.mark.timeout(60)
SERVER_KEEPALIVE_S = 0.3  # far below the client's own idle limit (KEEPALIVE_S)


@pytest.fixture
def server() -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """A server that closes idle connections after SERVER_KEEPALIVE_S; it records each
    request's client port and user agent."""
    seen: list[tuple[int, str]] = []

    async def loads(request: Request) -> JSONResponse:
        client = request.client
        seen.append((client.port if client else -1, request.headers.get("user-agent", "")))
        return JSONResponse({"loads": [{"num_running_reqs": len(seen)}]})

    app = Starlette(routes=[Route("/v1/loads", loads)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", timeout_keep_alive=SERVER_KEEPALIVE_S
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    finally:
        srv.should_exit = True
        thread.join(10)


def test_a_connection_the_server_closed_is_not_reused(
    server: tuple[str, list[tuple[int, str]]],
) -> None:
    url, seen = server
    exchanges: list[tuple[str, int]] = []

    async def on_request(request: SentRequest) -> None:
        assert request.method == "GET" and request.content is None
        exchanges.append((request.path, 0))

    async def on_response(response: ReceivedResponse) -> None:
        exchanges.append((response.request.path, response.status_code))

    async def main() -> list[Any]:
        hooks = {"request": [on_request], "response": [on_response]}
        client = SGLangClient(url, event_hooks=hooks)
        try:
            answers = [await client.loads(5.0)]
            await anyio.sleep(SERVER_KEEPALIVE_S * 4)  # the server has closed it by now
            answers.append(await client.loads(5.0))  # a stale connection would fail here
            answers.append(await client.loads(5.0))  # kept alive: the same connection
        finally:
            await client.aclose()
        return answers

    answers = anyio.run(main)
    assert [a["loads"][0]["num_running_reqs"] for a in answers] == [1, 2, 3]
    ports = [port for port, _ in seen]
    assert ports[0] != ports[1] == ports[2]  # a new connection after the server closed one
    assert {agent for _, agent in seen} == {USER_AGENT}
    path = "/v1/loads?include=core"
    assert exchanges == [(path, 0), (path, 200)] * 3
