"""The actor runtime: lifecycle, one dispatch table, readiness, heartbeats, graceful stop.

An actor binds one inbox (a ROUTER-style `ReplyChannel`) at its address and serves it one
message at a time, in arrival order: it looks the message's type up in its dispatch table
(`handlers()` plus the built-ins `Stop`, `Ping`, `GetStats` and `PeersChanged`) and awaits
the handler.
A handler's return value answers a `call` (`Ack` when it returns None); a handler that
raises is logged with the message type, answered with `ErrorReply` if it was a call, and
the actor keeps serving. A malformed message is logged and dropped the same way.

Lifecycle: `on_start` (bind and connect what the actor needs), then `ActorReady` to the
launcher's control address, then serve + heartbeat until a `Stop` message, SIGTERM/SIGINT
(process mode) or the launcher going away; then `on_stop` (shielded, bounded) and
`ActorStopped`. Every task is a child of the actor's task group: nothing outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import structlog

from transport.channels import ReplyChannel, RequestChannel, SendChannel, Transport
from transport.errors import PeerGone, ProtocolError, TransportError
from transport.messages import (
    Ack,
    ActorReady,
    ActorStats,
    ActorStopped,
    ErrorReply,
    GetStats,
    Heartbeat,
    Message,
    PeersChanged,
    Ping,
    Pong,
    Stop,
)
from transport.sockets import Incoming

log = structlog.get_logger()

Handler = Callable[[Any], Awaitable[Message | None]]
AddressBook = Callable[[str, int], str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorContext:
    """What a launcher hands an actor: who it is, where everyone is, how to talk."""

    role: str
    index: int
    address: str
    address_of: AddressBook
    transport: Transport
    options: Any = None
    control_address: str | None = None
    heartbeat_s: float = 1.0
    stop_timeout_s: float = 5.0
    handle_signals: bool = False
    parent_pid: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    peers: Mapping[str, int] = field(default_factory=dict)  # role -> count in the topology

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


class Mailbox:
    """Outgoing side of an actor or driver: one cached request socket per peer."""

    def __init__(self, transport: Transport, address_of: AddressBook) -> None:
        self.transport = transport
        self.address_of = address_of
        self._peers: dict[tuple[str, int], RequestChannel] = {}

    def peer(self, role: str, index: int = 0) -> RequestChannel:
        key = (role, index)
        sock = self._peers.get(key)
        if sock is None:
            sock = self._peers[key] = self.transport.request(self.address_of(role, index))
        return sock

    def forget(self, role: str) -> None:
        """Close the cached sockets to actors of `role` (they were replaced)."""
        for key in [k for k in self._peers if k[0] == role]:
            self._peers.pop(key).close()

    async def send_to(self, role: str, index: int, msg: Message) -> None:
        """One-way message that matters to actor `role`/`index`: waits at the high-water
        mark for a live peer, raises `PeerGone` at once for a disconnected one."""
        await self.peer(role, index).send(msg)

    def offer(self, role: str, index: int, msg: Message) -> bool:
        """Best-effort one-way message: dropped (False) when the peer's queue is full, so a
        dead or slow optional peer (draft store, estimator) never blocks the caller."""
        try:
            return self.peer(role, index).offer(msg)
        except TransportError:
            return False

    async def call(self, role: str, index: int, msg: Message, timeout: float = 10.0) -> Message:
        """Request/reply with actor `role`/`index`; raises the transport's typed errors."""
        return await self.peer(role, index).call(msg, timeout)


class Actor:
    """Base class: subclasses set `role`, `Options` and `handlers()`; the runtime does the rest."""

    role: ClassVar[str] = "actor"
    Options: ClassVar[type[Any] | None] = None

    def __init__(self, ctx: ActorContext) -> None:
        self.ctx = ctx
        self.options = ctx.options
        self.mailbox = Mailbox(ctx.transport, ctx.address_of)
        self.log = log.bind(actor=ctx.name)
        self.num_handled = 0
        self.num_failed = 0
        self.num_rejected = 0
        self.num_dropped: dict[str, int] = {}  # best-effort messages dropped, per peer role
        self._stop = anyio.Event()
        self._stop_reason = "stopped"
        self._tg: anyio.abc.TaskGroup | None = None
        self._dispatch: dict[type[Message], Handler] = {}
        self.peers: dict[str, int] = dict(ctx.peers)  # role -> count; `PeersChanged` updates

    # --- for subclasses -------------------------------------------------------------

    def handlers(self) -> Mapping[type[Message], Handler]:
        """The actor's dispatch table: message type -> handler."""
        return {}

    async def on_start(self) -> None:
        """Bind or connect extra sockets, load models; runs before readiness is reported."""

    async def on_stop(self) -> None:
        """Release resources; runs shielded, within `stop_timeout_s`."""

    async def on_peers_changed(self, role: str, count: int) -> None:
        """The actors of `role` were replaced by `count` new ones (between rollouts)."""

    def counters(self) -> dict[str, float]:
        """Extra counters reported in `ActorStats`."""
        return {}

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run `fn` as a child task of this actor; it is cancelled when the actor stops."""
        if self._tg is None:
            raise RuntimeError("start_soon() is only available once the actor runs")
        self._tg.start_soon(fn, *args)

    def request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    async def send_to(self, role: str, index: int, msg: Message) -> None:
        await self.mailbox.send_to(role, index, msg)

    def offer(self, role: str, index: int, msg: Message) -> bool:
        """Best effort (see `Mailbox.offer`); a dropped message counts in `dropped_<role>`."""
        if self.mailbox.offer(role, index, msg):
            return True
        key = f"dropped_{role}"
        self.num_dropped[key] = self.num_dropped.get(key, 0) + 1
        if self.num_dropped[key] in (1, 10, 100) or not self.num_dropped[key] % 1000:
            self.log.warning("message_dropped", peer=f"{role}-{index}", count=self.num_dropped[key])
        return False

    def has_peer(self, role: str) -> bool:
        """Whether the topology has actors of `role` (for optional peers like "drafts")."""
        return role in self.peers

    def num_peers(self, role: str) -> int:
        """How many actors of `role` the topology has (0 when none)."""
        return self.peers.get(role, 0)

    async def call(self, role: str, index: int, msg: Message, timeout: float = 10.0) -> Message:
        return await self.mailbox.call(role, index, msg, timeout)

    # --- built-in handlers ------------------------------------------------------------

    async def handle_stop(self, msg: Stop) -> None:
        self.request_stop(msg.reason)

    async def handle_ping(self, msg: Ping) -> Pong:
        return Pong(seq=msg.seq, payload=msg.payload)

    async def handle_peers_changed(self, msg: PeersChanged) -> None:
        if msg.count < 0 or msg.role == self.ctx.role:
            raise ValueError(f"{self.ctx.name} cannot take {msg.count} peers of {msg.role!r}")
        await self.on_peers_changed(msg.role, msg.count)
        self.peers[msg.role] = msg.count
        self.mailbox.forget(msg.role)

    async def handle_get_stats(self, msg: GetStats) -> ActorStats:
        return ActorStats(
            role=self.ctx.role,
            index=self.ctx.index,
            num_handled=self.num_handled,
            num_failed=self.num_failed,
            num_rejected=self.num_rejected,
            counters={**self.num_dropped, **self.counters()},
        )

    # --- runtime -----------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until stopped; returns after `on_stop` and `ActorStopped`."""
        structlog.contextvars.bind_contextvars(actor=self.ctx.name)
        inbox = self.ctx.transport.reply(self.ctx.address, bind=True)
        control = self._control()
        self._dispatch = {
            Stop: self.handle_stop,
            Ping: self.handle_ping,
            GetStats: self.handle_get_stats,
            PeersChanged: self.handle_peers_changed,
            **self.handlers(),
        }
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.ctx.handle_signals:  # before readiness: a SIGTERM is never missed
                    await tg.start(self._watch_signals)
                await self.on_start()
                await self._report_ready(control)
                tg.start_soon(self._serve, inbox)
                tg.start_soon(self._heartbeat, control)
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            await self._shutdown(control)

    def _control(self) -> SendChannel | None:
        if self.ctx.control_address is None:
            return None
        return self.ctx.transport.push(self.ctx.control_address)

    async def _report_ready(self, control: SendChannel | None) -> None:
        self.log.info("actor_ready", address=self.ctx.address, pid=os.getpid())
        if control is not None:
            ready = ActorReady(
                role=self.ctx.role, index=self.ctx.index, pid=os.getpid(), address=self.ctx.address
            )
            await control.send(ready)

    async def _shutdown(self, control: SendChannel | None) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.ctx.stop_timeout_s):
            try:
                await self.on_stop()
            except Exception:
                self.log.exception("on_stop_failed")
            if control is not None:
                stopped = ActorStopped(
                    role=self.ctx.role, index=self.ctx.index, reason=self._stop_reason
                )
                with contextlib.suppress(TransportError):
                    await control.send(stopped)
        self.log.info("actor_stopped", reason=self._stop_reason, handled=self.num_handled)
        self.ctx.transport.close()

    async def _serve(self, inbox: ReplyChannel) -> None:
        while True:
            try:
                incoming = await inbox.recv()
            except ProtocolError as exc:
                self.num_rejected += 1
                self.log.warning("message_rejected", error=str(exc))
                continue
            await self._handle(inbox, incoming)

    async def _handle(self, inbox: ReplyChannel, incoming: Incoming) -> None:
        msg = incoming.msg
        handler = self._dispatch.get(type(msg))
        reply: Message | None
        if handler is None:
            self.num_rejected += 1
            self.log.warning("message_unhandled", msg_type=type(msg).__name__)
            reply = ErrorReply(
                kind="Unhandled", detail=f"{self.ctx.name} has no handler for {type(msg).__name__}"
            )
        else:
            try:
                reply = await handler(msg)
                self.num_handled += 1
            except Exception as exc:
                self.num_failed += 1
                self.log.exception("handler_failed", msg_type=type(msg).__name__)
                reply = ErrorReply(kind=type(exc).__name__, detail=str(exc))
        if incoming.needs_reply:
            try:
                await inbox.reply(incoming, reply if reply is not None else Ack())
            except PeerGone as exc:
                self.log.warning("reply_dropped", msg_type=type(msg).__name__, error=str(exc))

    async def _heartbeat(self, control: SendChannel | None) -> None:
        seq = 0
        while True:
            await anyio.sleep(self.ctx.heartbeat_s)
            if self.ctx.parent_pid is not None and os.getppid() != self.ctx.parent_pid:
                self.log.warning("launcher_gone", parent_pid=self.ctx.parent_pid)
                self.request_stop("launcher gone")
                return
            if control is not None:
                seq += 1
                beat = Heartbeat(
                    role=self.ctx.role,
                    index=self.ctx.index,
                    seq=seq,
                    num_handled=self.num_handled,
                    num_failed=self.num_failed,
                    num_rejected=self.num_rejected,
                )
                await control.send(beat)

    async def _watch_signals(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for signum in signals:
                self.log.info("signal_received", signal=signal.Signals(signum).name)
                self.request_stop(signal.Signals(signum).name)
                return
