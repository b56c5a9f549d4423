from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from transport.errors import PeerGone, RequestTimeout
from transport.messages import Ping, Pong
from transport.security import CurveKeys, generate_keys
from transport.sockets import SocketOptions, ZmqTransport

pytestmark = pytest.mark.anyio


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve_once(server: object) -> None:
    incoming = await server.recv()  # type: ignore[attr-defined]
    await server.reply(incoming, Pong(seq=incoming.msg.seq))  # type: ignore[attr-defined]


async def test_tcp_with_curve_admits_the_cluster_key_only(tmp_path: Path) -> None:
    generate_keys(tmp_path / "cluster")
    generate_keys(tmp_path / "intruder")
    cluster = CurveKeys.load(tmp_path / "cluster")
    intruder = CurveKeys(
        public=CurveKeys.load(tmp_path / "intruder").public,
        secret=CurveKeys.load(tmp_path / "intruder").secret,
        directory=str(tmp_path / "intruder"),
    )
    address = f"tcp://127.0.0.1:{_free_port()}"
    server_side = ZmqTransport(SocketOptions(curve=cluster))
    member = ZmqTransport(SocketOptions(curve=cluster))
    stranger = ZmqTransport(SocketOptions(curve=intruder))
    try:
        server = server_side.reply(address, bind=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_serve_once, server)
            assert await member.request(address).call(Ping(seq=1), timeout=10) == Pong(seq=1)
        with pytest.raises((PeerGone, RequestTimeout)):  # the ZAP handler refuses it
            await stranger.request(address).call(Ping(seq=2), timeout=1.0)
    finally:
        for t in (server_side, member, stranger):
            t.close()


def test_keys_are_never_overwritten_and_missing_keys_are_explained(tmp_path: Path) -> None:
    generate_keys(tmp_path)
    with pytest.raises(FileExistsError):
        generate_keys(tmp_path)
    with pytest.raises(FileNotFoundError, match="seer keys"):
        CurveKeys.load(tmp_path / "elsewhere")


LEAK = """
import gc, sys
from transport.security import CurveKeys
from transport.sockets import SocketOptions, ZmqTransport
t = ZmqTransport(SocketOptions(curve=CurveKeys.load(sys.argv[1])))
server = t.reply("tcp://127.0.0.1:*", bind=True)  # a CURVE server: the authenticator starts
t.request(server.endpoint)  # a DEALER with its monitor
cycle = [t]
cycle.append(cycle)  # dropped in a reference cycle, as a failed test's frame can leave it
del t, server, cycle
gc.collect()
print("collected")
"""


def test_a_transport_dropped_without_close_is_collected_without_hanging(tmp_path: Path) -> None:
    """The garbage collector finalizing a CURVE transport nobody closed used to hang the
    process forever in `term()` (seen as a pytest worker stuck for 15 minutes that its
    timeout could not interrupt): the authenticator's sockets, and the transport's own
    (the collector clears the context's weak set of them first), were never closed."""
    generate_keys(tmp_path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", LEAK, str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("finalizing an unclosed transport hung")
    assert done.returncode == 0 and "collected" in done.stdout, done.stderr[-2000:]
