from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch
import zmq

from tests.conftest import assert_same
from transport.errors import PeerGone, RemoteError, RequestTimeout
from transport.inproc import InprocHub, InprocTransport
from transport.messages import ErrorReply, Ping, Pong, TensorBlob
from transport.sockets import SocketOptions, ZmqTransport

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["ipc", "inproc"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    if request.param == "ipc":
        t: Any = ZmqTransport(SocketOptions(hwm=64))
        base = f"ipc://{tmp_path}"
    else:
        t = InprocTransport(InprocHub(), SocketOptions(hwm=64))
        base = "inproc://test"
    yield t, base
    t.close()


async def test_push_pull_keeps_order_and_tensors(transport: tuple[Any, str]) -> None:
    t, base = transport
    pull = t.pull(f"{base}/pp", bind=True)
    push = t.push(f"{base}/pp")
    tensor = torch.randn(3, 4).to(torch.bfloat16)
    async with anyio.create_task_group() as tg:

        async def produce() -> None:
            for i in range(200):  # more than the HWM: the sender waits for the receiver
                await push.send(Ping(seq=i))
            await push.send(TensorBlob(name="w", tensor=tensor))

        tg.start_soon(produce)
        seqs = [(await pull.recv()).seq for _ in range(200)]  # type: ignore[attr-defined]
        last = await pull.recv()
    assert seqs == list(range(200))
    assert isinstance(last, TensorBlob)
    assert_same(last.tensor, tensor)


async def test_pub_sub_filters_by_topic(transport: tuple[Any, str]) -> None:
    t, base = transport
    pub = t.pub(f"{base}/ps", bind=True)
    sub = t.sub(f"{base}/ps", topics=(b"keep",))
    with anyio.fail_after(5):
        got: Any = None
        while got is None:  # zmq subscriptions take a moment to propagate
            await pub.send(Ping(seq=0), topic=b"drop")
            await pub.send(Ping(seq=1), topic=b"keep")
            with anyio.move_on_after(0.05):
                got = await sub.recv()
    assert got == Ping(seq=1)


async def test_request_reply_with_correlation(transport: tuple[Any, str]) -> None:
    t, base = transport
    server = t.reply(f"{base}/rr", bind=True)
    client = t.request(f"{base}/rr")

    async def serve() -> None:
        while True:
            incoming = await server.recv()
            if isinstance(incoming.msg, Ping) and incoming.msg.seq < 0:
                await server.reply(incoming, ErrorReply(kind="ValueError", detail="negative"))
            elif incoming.needs_reply:
                await server.reply(incoming, Pong(seq=incoming.msg.seq * 10))  # type: ignore[attr-defined]

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        results: dict[int, Any] = {}

        async def ask(i: int) -> None:
            results[i] = await client.call(Ping(seq=i), timeout=5)

        async with anyio.create_task_group() as callers:  # concurrent calls, one socket
            for i in range(20):
                callers.start_soon(ask, i)
        await client.send(Ping(seq=99))  # one-way: no reply expected
        with pytest.raises(RemoteError, match="negative"):
            await client.call(Ping(seq=-1), timeout=5)
        tg.cancel_scope.cancel()
    assert results == {i: Pong(seq=i * 10) for i in range(20)}


async def test_call_times_out_with_a_clear_error(transport: tuple[Any, str]) -> None:
    t, base = transport
    t.reply(f"{base}/silent", bind=True)  # bound, never answers
    client = t.request(f"{base}/silent")
    with pytest.raises(RequestTimeout, match=r"no reply to Ping .* within 0.2 s"):
        await client.call(Ping(seq=1), timeout=0.2)


async def test_malformed_call_gets_an_error_reply_over_zmq(tmp_path: Path) -> None:
    t = ZmqTransport()
    server = t.reply(f"ipc://{tmp_path}/bad", bind=True)
    raw = zmq.asyncio.Context.instance().socket(zmq.DEALER)
    raw.connect(f"ipc://{tmp_path}/bad")
    try:
        await raw.send_multipart([b"corr0001", b"\xc1not msgpack"])
        with pytest.raises(Exception, match="not valid msgpack"):
            await server.recv()
        with anyio.fail_after(5):
            corr, header = await raw.recv_multipart()
        assert corr == b"corr0001" and b"ProtocolError" in header
    finally:
        raw.close(0)
        t.close()


SERVER = textwrap.dedent(
    """
    import sys, anyio
    from transport.sockets import ZmqTransport
    from transport.messages import Pong
    async def main():
        t = ZmqTransport()
        server = t.reply(sys.argv[1], bind=True)
        first = await server.recv()
        await server.reply(first, Pong(seq=0))
        await server.recv()   # the second call is never answered: we get killed
        print("held", flush=True)
        await anyio.sleep_forever()
    anyio.run(main)
    """
)


async def test_call_fails_with_peer_gone_when_the_peer_process_dies(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/peer"
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, address], cwd=os.getcwd(), stdout=subprocess.PIPE
    )
    t = ZmqTransport()
    client = t.request(address)
    try:
        assert await client.call(Ping(seq=0), timeout=30) == Pong(seq=0)

        async def kill_soon() -> None:
            assert proc.stdout is not None  # the server holds the second call: kill it
            assert await anyio.to_thread.run_sync(proc.stdout.readline) == b"held\n"
            proc.kill()

        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_soon)
            with pytest.raises(PeerGone, match="disconnected"):
                await client.call(Ping(seq=1), timeout=20)
        with pytest.raises(PeerGone):  # and later calls fail fast, not after a timeout
            await client.call(Ping(seq=2), timeout=20)
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its stdout
        t.close()


async def test_calls_interleaved_with_sends_on_one_socket_never_stall(tmp_path: Path) -> None:
    """A one-way send on the DEALER can consume the FD edge of a reply that arrived: the
    waiting call must still see it (before the fix a few calls a second here hung until
    their timeout, and the scheduler then declared a live generator lost)."""
    t = ZmqTransport()
    server = t.reply(f"ipc://{tmp_path}/s", bind=True)
    client = t.request(f"ipc://{tmp_path}/s")

    async def serve() -> None:
        while True:
            incoming = await server.recv()
            if incoming.needs_reply:
                await anyio.sleep(0.0005)
                await server.reply(incoming, Pong(seq=incoming.msg.seq))  # type: ignore[attr-defined]

    async def send_forever() -> None:
        for i in itertools.count():
            await client.send(Ping(seq=-1))
            if i % 20 == 0:
                await anyio.sleep(0)

    calls = timeouts = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            tg.start_soon(send_forever)
            with anyio.move_on_after(4):
                while True:
                    try:
                        # a stalled call waits out its whole timeout; 1.5 s is far above
                        # a reply's time even on a loaded machine (0.3 s was not, under xdist)
                        assert await client.call(Ping(seq=calls), timeout=1.5) == Pong(seq=calls)
                    except RequestTimeout:
                        timeouts += 1
                    calls += 1
            tg.cancel_scope.cancel()
    finally:
        t.close()
    assert calls > 100 and timeouts == 0, (calls, timeouts)


async def test_many_tasks_blocked_on_one_socket_share_its_wakeups(tmp_path: Path) -> None:
    """Senders held at the high-water mark and a call waiting for its reply all wait on the
    socket's one FD; the event loop lets one task watch an FD, so before the fix the second
    waiter failed with anyio's BusyResourceError (seen in CI)."""
    t = ZmqTransport(SocketOptions(hwm=4))
    server = t.reply(f"ipc://{tmp_path}/s", bind=True)
    client = t.request(f"ipc://{tmp_path}/s")
    per_sender, senders = 200, 4
    seen: list[int] = []

    async def serve_slowly() -> None:
        while True:
            incoming = await server.recv()
            await anyio.sleep(0.0002)  # slower than the senders: they sit at the mark
            if incoming.needs_reply:
                await server.reply(incoming, Pong(seq=incoming.msg.seq))  # type: ignore[attr-defined]
            else:
                seen.append(incoming.msg.seq)  # type: ignore[attr-defined]

    async def sender(k: int) -> None:
        for i in range(per_sender):
            await client.send(Ping(seq=k * per_sender + i))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_slowly)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as senders_tg:
                    for k in range(senders):
                        senders_tg.start_soon(sender, k)
                    for n in range(20):
                        assert await client.call(Ping(seq=-n), timeout=10) == Pong(seq=-n)
                while len(seen) < per_sender * senders:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        t.close()
    assert sorted(seen) == list(range(per_sender * senders))


async def test_request_sockets_closed_at_once_free_their_zmq_sockets(tmp_path: Path) -> None:
    # Each DEALER has a monitor pair; closing the pair before the monitor stopped leaked
    # both, and after ~340 short-lived clients the context refused new sockets (EMFILE).
    # Monitors are named uniquely, too: a name reused by file descriptor collided while a
    # closed socket's monitor was still being reaped ("Address already in use").
    t = ZmqTransport(SocketOptions())
    try:
        server = t.reply(f"ipc://{tmp_path}/again", bind=True)
        for _ in range(600):
            t.request(f"ipc://{tmp_path}/again").close()
        async with anyio.create_task_group() as tg:

            async def serve() -> None:
                incoming = await server.recv()
                await server.reply(incoming, Pong(seq=incoming.msg.seq))  # type: ignore[attr-defined]

            tg.start_soon(serve)
            client = t.request(f"ipc://{tmp_path}/again")
            assert await client.call(Ping(seq=7), timeout=5) == Pong(seq=7)
    finally:
        t.close()
