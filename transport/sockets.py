"""Typed async sockets over `zmq.asyncio`: push/pull, pub/sub and request/reply.

Every socket speaks `Message`s through the one codec. Sends and receives first try the
non-blocking path on a synchronous shadow of the socket (no future, no loop round trip:
about 6x the message rate of plain `await sock.recv()`), and only await readiness when the
socket would block, so the high-water marks give real backpressure. Request/reply pairs a
DEALER (`RequestSocket`: one-way `send` and `call` with correlation ids, per-call timeouts,
`PeerGone` when the peer disconnects) with a ROUTER (`ReplySocket`). Addresses are
`inproc://`, `ipc://` or `tcp://`; tcp sockets use CURVE when keys are configured.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.lowlevel
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from transport.codec import DEFAULT_LIMITS, CodecLimits, decode, encode
from transport.errors import ChannelClosed, PeerGone, ProtocolError, RemoteError, RequestTimeout
from transport.messages import ErrorReply, Message
from transport.security import CurveKeys

_CHECKPOINT_EVERY: Final = 64
_ONE_WAY: Final = b""
_MAX_FD_WAIT_S: Final = 0.05
_MAX_REPLY_WAIT_S: Final = 0.01  # a call's wait for its reply re-checks this often
_MONITOR_IDS = itertools.count()  # unique inproc names for socket monitors
_MONITOR_STOP_WAIT_S: Final = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketOptions:
    """Per-socket settings shared by every socket a transport makes."""

    hwm: int = 1000
    linger_s: float = 0.5
    limits: CodecLimits = DEFAULT_LIMITS
    heartbeat_s: float = 1.0
    # a one-way send that matters (`RequestSocket.send`) waits at the high-water mark at most
    # this long for a peer that stays connected; a disconnected peer fails it at once
    send_timeout_s: float = 30.0
    curve: CurveKeys | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.hwm <= 0:
            raise ValueError("SocketOptions.hwm must be positive")
        if self.send_timeout_s <= 0:
            raise ValueError("SocketOptions.send_timeout_s must be positive")


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message received by a `ReplySocket`; `needs_reply` when it came from `call`."""

    msg: Message
    peer: bytes
    corr: bytes

    @property
    def needs_reply(self) -> bool:
        return self.corr != _ONE_WAY


def _as_bytes(frame: Any) -> bytes:
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def _name(msg: Message) -> str:
    return type(msg).__name__


def _prepare_bind(address: str) -> None:
    if address.startswith("ipc://"):
        os.makedirs(os.path.dirname(address[len("ipc://") :]) or ".", exist_ok=True)


class _Socket:
    """A zmq.asyncio socket plus its synchronous shadow for the non-blocking fast path."""

    def __init__(self, sock: zmq.asyncio.Socket, options: SocketOptions, address: str) -> None:
        self._async = sock
        self._sync: zmq.Socket[bytes] = zmq.Socket.shadow(sock.underlying)
        self.options = options
        self.address = address
        self._ops = 0
        self._fd_edge: anyio.Event | None = None  # set when the task watching the FD wakes

    async def _wait(self, event: int, max_wait_s: float = _MAX_FD_WAIT_S) -> None:
        """Wait until `event` (POLLIN/POLLOUT) may be ready.

        The zmq FD is edge-triggered: reading ZMQ_EVENTS re-arms it, so check the events
        first and sleep on the FD only when they say nothing is ready. The sleep is bounded:
        an edge that fires between the check and the wait (seen under load for POLLOUT at
        the high-water mark) then costs a few milliseconds instead of a hang.

        One FD serves every task on the socket (a sender at the high-water mark, a call
        waiting for its reply), and the event loop lets only one task watch it: the first
        one does, the others wait for its wakeup and then re-check their own event.
        """
        if int(self._sync.get(zmq.EVENTS)) & event:
            return
        with anyio.move_on_after(max_wait_s):
            if self._fd_edge is not None:
                await self._fd_edge.wait()
                return
            self._fd_edge = edge = anyio.Event()
            try:
                await anyio.wait_readable(self._sync.FD)
            finally:
                self._fd_edge = None
                edge.set()

    # Every 64th operation yields to the event loop (fairness) without taking a
    # cancellation there: a message already sent or received must not be lost to a timeout
    # that expires in that yield (a driver polling `recv` with short timeouts would drop it).

    async def _send_frames(self, frames: list[Any]) -> None:
        while True:
            if self._async.closed:
                raise ChannelClosed(f"socket for {self.address} is closed")
            # small bytes frames are cheapest copied; tensor buffers go zero-copy
            copy = all(type(f) is bytes for f in frames)
            try:
                self._sync.send_multipart(frames, zmq.NOBLOCK, copy=copy)
            except zmq.Again:
                await self._wait(zmq.POLLOUT)  # at the high-water mark: backpressure
                continue
            self._ops += 1
            if not self._ops % _CHECKPOINT_EVERY:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            return

    async def _recv_frames(self) -> list[Any]:
        while True:
            if self._async.closed:
                raise ChannelClosed(f"socket for {self.address} is closed")
            try:
                frames = self._recv_now()
            except zmq.Again:
                await self._wait(zmq.POLLIN)
                continue
            self._ops += 1
            if not self._ops % _CHECKPOINT_EVERY:
                await anyio.lowlevel.cancel_shielded_checkpoint()
            return frames

    def _try_send_frames(self, frames: list[Any]) -> bool:
        """Queue `frames` without waiting; False (nothing queued) at the high-water mark."""
        if self._async.closed:
            raise ChannelClosed(f"socket for {self.address} is closed")
        copy = all(type(f) is bytes for f in frames)
        try:
            self._sync.send_multipart(frames, zmq.NOBLOCK, copy=copy)
        except zmq.Again:
            return False
        return True

    def _recv_now(self) -> list[Any]:
        """One multipart message: the first frame as bytes (small: a copy is cheapest), the
        rest as zero-copy `zmq.Frame`s (tensor payloads are never copied)."""
        frames: list[Any] = [self._sync.recv(zmq.NOBLOCK)]
        while self._sync.get(zmq.RCVMORE):
            frames.append(self._sync.recv(copy=False))
        return frames

    @property
    def endpoint(self) -> str:
        """The address this socket last bound or connected, with a wildcard port resolved
        (`tcp://10.0.0.5:*` binds a free port; this says which)."""
        endpoint = self._sync.get(zmq.LAST_ENDPOINT)
        return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)

    def close(self) -> None:
        if not self._async.closed:
            self._async.close(linger=int(self.options.linger_s * 1000))


class PushSocket(_Socket):
    async def send(self, msg: Message) -> None:
        await self._send_frames(encode(msg, self.options.limits))


class PullSocket(_Socket):
    async def recv(self) -> Message:
        """The next message; `ProtocolError` for a malformed one (the socket stays usable)."""
        return decode(await self._recv_frames(), self.options.limits)


class PubSocket(_Socket):
    async def send(self, msg: Message, topic: bytes = b"") -> None:
        await self._send_frames([topic, *encode(msg, self.options.limits)])


class SubSocket(_Socket):
    async def recv(self) -> Message:
        frames = await self._recv_frames()
        if len(frames) < 2:
            raise ProtocolError("published message without a topic frame")
        return decode(frames[1:], self.options.limits)


class ReplySocket(_Socket):
    """ROUTER side: receives one-way messages and calls; answers calls with `reply`."""

    async def recv(self) -> Incoming:
        frames = await self._recv_frames()
        if len(frames) < 3:
            error = ProtocolError(f"request with {len(frames)} frames; expected at least 3")
            if len(frames) == 2 and _as_bytes(frames[1]) != _ONE_WAY:  # a call: answer it
                reply = ErrorReply(kind="ProtocolError", detail=str(error))
                await self._send_reply(frames[0], _as_bytes(frames[1]), reply)
            raise error
        peer, corr = frames[0], _as_bytes(frames[1])
        try:
            msg = decode(frames[2:], self.options.limits)
        except ProtocolError as exc:
            if corr != _ONE_WAY:
                await self._send_reply(
                    peer, corr, ErrorReply(kind="ProtocolError", detail=str(exc))
                )
            raise
        return Incoming(msg, peer, corr)

    async def reply(self, incoming: Incoming, msg: Message) -> None:
        if not incoming.needs_reply:
            raise ValueError("cannot reply to a one-way message")
        await self._send_reply(incoming.peer, incoming.corr, msg)

    async def _send_reply(self, peer: bytes, corr: bytes, msg: Message) -> None:
        try:
            await self._send_frames([peer, corr, *encode(msg, self.options.limits)])
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                raise PeerGone(f"caller of {self.address} is gone; reply dropped") from None
            raise


class RequestSocket(_Socket):
    """DEALER side: one-way `send` and `call` with correlation ids.

    No background task: whichever caller is waiting reads the next reply (one at a time,
    under a lock released after each message) and hands it to the call it belongs to.
    A socket monitor tells when the peer disconnects: calls in flight then fail with
    `PeerGone`, and so does any call made while the peer stays disconnected.
    """

    def __init__(self, sock: zmq.asyncio.Socket, options: SocketOptions, address: str) -> None:
        super().__init__(sock, options, address)
        self._ids = itertools.count(1)
        self._replies: dict[bytes, Message | Exception] = {}
        self._pending: set[bytes] = set()
        self._lock = anyio.Lock()
        # the monitor's own socket object owns its handle and is closed exactly once, in
        # close(); the sync shadow only reads events without blocking (closing the shadow
        # too would close one zmq handle twice)
        # own inproc name: pyzmq's default names it by file descriptor, and a closed
        # DEALER's monitor endpoint lives until libzmq reaps it, so a new socket that gets
        # the same descriptor first would fail with "Address already in use"
        self._monitor_owner = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_MONITOR_STOPPED,
            addr=f"inproc://seer-monitor-{os.getpid()}-{next(_MONITOR_IDS)}",
        )
        self._monitor: zmq.Socket[bytes] = zmq.Socket.shadow(self._monitor_owner.underlying)
        self.state = "connecting"

    async def send(self, msg: Message) -> None:
        """One-way, for messages that matter: the peer handles `msg` and sends nothing back.

        At the high-water mark it waits for the peer to drain, but fails fast with
        `PeerGone` when the peer has disconnected (a dead peer never drains: waiting would
        stall the sender forever) or has not drained for `send_timeout_s`."""
        frames = [_ONE_WAY, *encode(msg, self.options.limits)]
        if self._try_send_frames(frames):
            await self._checkpoint_sometimes()
            return
        deadline = anyio.current_time() + self.options.send_timeout_s
        while not self._try_send_frames(frames):
            self._drain_monitor()
            if self.state == "gone":
                raise PeerGone(f"peer at {self.address} is disconnected; {_name(msg)} not sent")
            if anyio.current_time() > deadline:
                raise PeerGone(
                    f"peer at {self.address} drained nothing for "
                    f"{self.options.send_timeout_s:g} s; {_name(msg)} not sent"
                )
            await self._wait(zmq.POLLOUT)

    def offer(self, msg: Message) -> bool:
        """One-way and best effort: queue `msg` if there is room, else drop it. Never waits
        (for peers whose loss costs quality, never progress: the draft store, the
        estimator). True when queued. A disconnected peer's queue fills and then drops."""
        return self._try_send_frames([_ONE_WAY, *encode(msg, self.options.limits)])

    async def _checkpoint_sometimes(self) -> None:
        self._ops += 1
        if not self._ops % _CHECKPOINT_EVERY:
            await anyio.lowlevel.cancel_shielded_checkpoint()

    async def call(self, msg: Message, timeout: float = 10.0) -> Message:
        """The peer's reply to `msg`; raises `RequestTimeout`, `PeerGone` or `RemoteError`."""
        self._drain_monitor()
        if self.state == "gone":
            raise PeerGone(f"peer at {self.address} is disconnected")
        corr = next(self._ids).to_bytes(8, "little")
        self._pending.add(corr)
        try:
            await self._send_frames([corr, *encode(msg, self.options.limits)])
            with anyio.fail_after(timeout):
                while corr not in self._replies:
                    async with self._lock:
                        if corr not in self._replies:
                            await self._read_one()
        except TimeoutError:
            raise RequestTimeout(
                f"no reply to {type(msg).__name__} from {self.address} within {timeout:g} s "
                f"(peer {self.state})"
            ) from None
        finally:
            self._pending.discard(corr)
        reply = self._replies.pop(corr)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, ErrorReply):
            raise RemoteError(reply.kind, reply.detail)
        return reply

    async def _read_one(self) -> None:
        # Bounded tighter than a send's wait: a reply whose FD edge was consumed by a send on
        # this same socket (the scheduler sends chunks and calls for loads on one DEALER)
        # must not leave the call asleep until it times out (a live peer declared lost), and
        # the monitor's disconnect events are read on each re-check.
        if not self._try_read():
            await self._wait(zmq.POLLIN, _MAX_REPLY_WAIT_S)
            self._try_read()

    def _try_read(self) -> bool:
        got = self._drain_monitor()
        try:
            frames = self._recv_now()
        except zmq.Again:
            return got
        corr = frames[0]
        if corr in self._pending:  # late replies to timed-out calls are dropped
            try:
                self._replies[corr] = decode(frames[1:], self.options.limits)
            except ProtocolError as exc:
                self._replies[corr] = exc
        return True

    def _drain_monitor(self) -> bool:
        got = False
        while True:
            try:
                event = parse_monitor_message(self._monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return got
            got = True
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.state = "connected"
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self.state = "gone"
                for corr in self._pending:
                    self._replies.setdefault(
                        corr, PeerGone(f"peer at {self.address} disconnected during the call")
                    )

    def close(self) -> None:
        # No disable_monitor(): it waits, holding the GIL, for a libzmq lock that an I/O
        # thread can hold while it is itself blocked (seen as a rare hang at close). Closing
        # the DEALER stops its monitor; the event reader is closed once the monitor says it
        # stopped (at most `_MONITOR_STOP_WAIT_S`, the GIL released): closed before, libzmq
        # never reaps the pair, and a process that reconnects often runs out of sockets.
        was_open = not self._async.closed
        super().close()
        if was_open:
            deadline = time.monotonic() + _MONITOR_STOP_WAIT_S
            while (left := deadline - time.monotonic()) > 0 and self._monitor.poll(
                int(left * 1000) + 1
            ):
                event = parse_monitor_message(self._monitor.recv_multipart())
                if event["event"] == zmq.EVENT_MONITOR_STOPPED:
                    break
            self._monitor_owner.close(linger=0)


class _Context(zmq.asyncio.Context):
    """A context that closes what it made before it terminates, also when the garbage
    collector finalizes it. A transport dropped without `close()` would otherwise hang the
    process forever in `Context.__del__` -> `term()`: the collector clears the context's
    weak set of sockets before any finalizer runs, so pyzmq's `destroy()` closes nothing,
    and the CURVE authenticator's thread holds sockets on a shadow context it never sees.
    Here the sockets are held strongly (closed ones are dropped as new ones are made) and
    the authenticator is stopped first."""

    authenticator: Any = None
    _made: list[zmq.Socket[Any]] = []  # declared here: pyzmq takes other names for options

    def __init__(self) -> None:
        super().__init__()
        self._made = []

    def socket(self, socket_type: int, **kwargs: Any) -> Any:  # type: ignore[override]
        sock = super().socket(socket_type, **kwargs)
        self._made = [s for s in self._made if not s.closed]
        self._made.append(sock)
        return sock

    def destroy(self, linger: int | None = None) -> None:
        auth, self.authenticator = self.authenticator, None
        if auth is not None:
            auth.stop()
        made, self._made = self._made, []
        for sock in made:
            if not sock.closed:
                sock.close(linger=0 if linger is None else linger)
        super().destroy(linger)


class ZmqTransport:
    """Makes typed sockets on one zmq context; `close()` closes them all."""

    def __init__(self, options: SocketOptions | None = None) -> None:
        self.options = options or SocketOptions()
        self.ctx = _Context()
        self._sockets: list[_Socket] = []

    def _make(self, kind: int, address: str, bind: bool, wrap: Any) -> Any:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.SNDHWM, self.options.hwm)
        sock.setsockopt(zmq.RCVHWM, self.options.hwm)
        sock.setsockopt(zmq.LINGER, int(self.options.linger_s * 1000))
        if kind == zmq.ROUTER:
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if address.startswith("tcp://"):
            ivl = int(self.options.heartbeat_s * 1000)
            sock.setsockopt(zmq.HEARTBEAT_IVL, ivl)
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * ivl)
            if self.options.curve is not None:
                self._secure(sock, bind)
        wrapped = wrap(sock, self.options, address)  # before connecting: monitors see it all
        if bind:
            _prepare_bind(address)
            sock.bind(address)
        else:
            sock.connect(address)
        self._sockets.append(wrapped)
        return wrapped

    def _secure(self, sock: zmq.asyncio.Socket, server: bool) -> None:
        from transport.security import apply_curve, start_authenticator

        assert self.options.curve is not None
        if server and self.ctx.authenticator is None:
            self.ctx.authenticator = start_authenticator(self.ctx, self.options.curve)
        apply_curve(sock, self.options.curve, server=server)

    def push(self, address: str, *, bind: bool = False) -> PushSocket:
        sock: PushSocket = self._make(zmq.PUSH, address, bind, PushSocket)
        return sock

    def pull(self, address: str, *, bind: bool = True) -> PullSocket:
        sock: PullSocket = self._make(zmq.PULL, address, bind, PullSocket)
        return sock

    def pub(self, address: str, *, bind: bool = True) -> PubSocket:
        sock: PubSocket = self._make(zmq.PUB, address, bind, PubSocket)
        return sock

    def sub(
        self, address: str, *, topics: tuple[bytes, ...] = (b"",), bind: bool = False
    ) -> SubSocket:
        sock: SubSocket = self._make(zmq.SUB, address, bind, SubSocket)
        for topic in topics:
            sock._async.setsockopt(zmq.SUBSCRIBE, topic)
        return sock

    def reply(self, address: str, *, bind: bool = True) -> ReplySocket:
        sock: ReplySocket = self._make(zmq.ROUTER, address, bind, ReplySocket)
        return sock

    def request(self, address: str, *, bind: bool = False) -> RequestSocket:
        sock: RequestSocket = self._make(zmq.DEALER, address, bind, RequestSocket)
        return sock

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
        self.ctx.destroy(linger=int(self.options.linger_s * 1000))
