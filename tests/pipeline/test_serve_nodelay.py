"""`seer serve`'s listening socket is TCP by protocol, so asyncio turns Nagle off on every
connection it accepts. With protocol 0 it did not: each request on a reused keep-alive
connection waited for the client's delayed ACK (about 40 ms a request on localhost)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pipeline.serve.server import _bind

pytestmark = pytest.mark.anyio


async def test_accepted_connections_have_nagle_off() -> None:
    listener = _bind("127.0.0.1", 0)
    accepted: asyncio.Queue[int] = asyncio.Queue()

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        accepted.put_nowait(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_connect, sock=listener)
    try:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        nodelay = await asyncio.wait_for(accepted.get(), 10)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert nodelay != 0
