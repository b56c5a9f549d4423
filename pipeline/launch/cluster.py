"""The driver's handle on a running set of actors, whatever launched them.

`Cluster` sends to, calls and receives from actors and tracks each one's status;
`await_ready` waits for every actor's `ActorReady` (failing fast, with the actor's log tail,
when a process dies first); `LaunchError` is what a launcher raises when an actor fails to
start or to report ready in time.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog
import zmq
from zmq.utils.monitor import parse_monitor_message

from actors.base import AddressBook, Mailbox
from pipeline.config import CONTROL, DRIVER, PipelineConfig
from transport.channels import RecvChannel, ReplyChannel, Transport
from transport.messages import (
    ActorReady,
    ActorStats,
    ActorStopped,
    GetStats,
    Heartbeat,
    Message,
    PeersChanged,
)

log = structlog.get_logger()


class LaunchError(RuntimeError):
    """An actor failed to start or to report ready in time."""


@dataclass
class ActorStatus:
    role: str
    index: int
    pid: int = 0
    ready: bool = False
    stopped: bool = False
    last_heartbeat: float = 0.0
    num_handled: int = 0
    num_failed: int = 0
    num_rejected: int = 0
    log_path: Path | None = None
    lost: bool = False  # died without being asked to stop (a launcher's liveness signal)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class Cluster:
    """The driver's view of a running topology."""

    def __init__(
        self,
        config: PipelineConfig,
        transport: Transport,
        *,
        address_of: AddressBook | None = None,
        inbox: ReplyChannel | None = None,
        control: RecvChannel | None = None,
    ) -> None:
        """`address_of`, `inbox`, `control`: a launcher that learnt the addresses at run
        time (Ray, static) passes its book and the driver's sockets it bound already."""
        self.config = config
        self.transport = transport
        self.address_of = address_of or config.address
        self.mailbox = Mailbox(transport, self.address_of)
        self.inbox: ReplyChannel = inbox or transport.reply(config.address(DRIVER), bind=True)
        self.control: RecvChannel = control or transport.pull(config.address(CONTROL), bind=True)
        self.status = {key: ActorStatus(*key) for key in config.topology.instances()}
        self.handshakes = HandshakeWatch(config, self.inbox, self.control)
        # set by a launcher that can replace one role's actors in place (`restart_role`)
        self.restarter: Callable[[PipelineConfig, str], Awaitable[None]] | None = None

    async def restart_role(self, config: PipelineConfig, role: str) -> None:
        """Stop the actors of `role` and start `config`'s (its count and options for that
        role; every other actor keeps running), then tell every other actor the new count
        (`PeersChanged`, a call each). `NotImplementedError` where the launcher cannot."""
        if self.restarter is None:
            raise NotImplementedError("this launcher restarts whole topologies only")
        await self.restarter(config, role)
        self.mailbox.forget(role)
        count = config.topology.group(role).count
        for other, index in [k for k in self.status if k[0] != role]:
            await self.call(other, index, PeersChanged(role=role, count=count), timeout=30.0)

    async def send(self, role: str, index: int, msg: Message) -> None:
        await self.mailbox.send_to(role, index, msg)

    async def call(self, role: str, index: int, msg: Message, timeout: float = 10.0) -> Message:
        return await self.mailbox.call(role, index, msg, timeout)

    async def recv(self, timeout: float | None = None) -> Message:
        """The next message sent to the driver (`TimeoutError` after `timeout` seconds)."""
        with anyio.fail_after(timeout):
            incoming = await self.inbox.recv()
        return incoming.msg

    async def stats(self, timeout: float = 5.0) -> list[ActorStats]:
        out = []
        for role, index in self.status:
            reply = await self.call(role, index, GetStats(), timeout)
            assert isinstance(reply, ActorStats)
            out.append(reply)
        return out

    def note_control(self, msg: Message) -> None:
        """Book-keeping for control-plane messages (readiness, heartbeats, stops)."""
        if isinstance(msg, ActorReady | Heartbeat | ActorStopped):
            status = self.status.get((msg.role, msg.index))
            if status is None:
                log.warning("unknown_actor", role=msg.role, index=msg.index)
                return
            if isinstance(msg, ActorReady):
                status.ready, status.pid = True, msg.pid
                status.last_heartbeat = time.monotonic()
            elif isinstance(msg, Heartbeat):
                status.last_heartbeat = time.monotonic()
                status.num_handled, status.num_failed = msg.num_handled, msg.num_failed
                status.num_rejected = msg.num_rejected
            else:
                status.stopped = True

    async def drain_control(self, until: Any = None, timeout: float = 0.0) -> None:
        """Read control messages until `until()` holds or `timeout` passes."""
        with anyio.move_on_after(timeout):
            while until is None or not until():
                self.note_control(await self.control.recv())

    async def poll_control(self) -> None:
        """Read the control messages already queued (readiness, heartbeats, stops)."""
        await self.drain_control(timeout=0.02)

    def trouble(self, role: str, index: int, silent_after_s: float) -> str:
        """Why actor `role`/`index` looks dead ("" when it looks alive): its process exited,
        it sent no heartbeat for `silent_after_s`, or it stopped."""
        status = self.status[(role, index)]
        code = status.process.poll() if status.process is not None else None
        if code is not None:
            return f"{role}-{index} exited with code {code}"
        if status.stopped:
            return f"{role}-{index} stopped"
        silence = time.monotonic() - status.last_heartbeat
        if status.last_heartbeat and silence > silent_after_s:
            return f"{role}-{index} sent no heartbeat for {silence:.1f} s"
        return ""

    def not_ready(self) -> list[str]:
        return [f"{r}-{i}" for (r, i), s in self.status.items() if not s.ready]


def log_tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class HandshakeWatch:
    """Monitors on the driver's own sockets (its inbox, control) under tcp + CURVE: an
    actor whose keys are not the cluster's fails the handshake there (the driver cannot
    decrypt its hello: another `seer keys` folder; or the ZAP handler refuses its key),
    which it never sees as anything but silence. `failure()` says so, with the reason."""

    MASK = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL

    def __init__(self, config: PipelineConfig, *channels: object) -> None:
        self.keys = config.transport.curve_keys
        self.monitors: list[Any] = []
        if config.transport.scheme != "tcp" or not self.keys:
            return
        for channel in channels:
            sock = getattr(channel, "_async", None)  # a transport.sockets socket
            if sock is not None and not sock.closed:
                owner = sock.get_monitor_socket(
                    self.MASK, addr=f"inproc://seer-handshake-{os.getpid()}-{next(_WATCH_IDS)}"
                )
                self.monitors.append(zmq.Socket.shadow(owner.underlying))

    def failure(self) -> str:
        """ "" while no handshake failed; else what failed, where and why."""
        for monitor in self.monitors:
            try:
                event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))
            except (zmq.Again, zmq.ZMQError):
                continue
            where = event["endpoint"].decode(errors="replace")
            if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                why = f"the ZAP handler refused a peer's key (status {event['value']})"
            else:
                why = f"a peer's CURVE handshake failed (protocol error {event['value']:#x})"
            return (
                f"CURVE authentication failed at the driver's {where}: {why}; that peer holds "
                f"other keys than transport.curve_keys ({self.keys}): copy the same `seer "
                "keys` folder to every host"
            )
        return ""


_WATCH_IDS = itertools.count()


async def await_ready(cluster: Cluster) -> None:
    deadline = time.monotonic() + cluster.config.ready_timeout_s
    while cluster.not_ready():
        failure = cluster.handshakes.failure()
        if failure:
            raise LaunchError(f"actors not ready ({', '.join(cluster.not_ready())}): {failure}")
        for status in cluster.status.values():
            code = status.process.poll() if status.process else None
            if code is not None and not status.ready:
                raise LaunchError(
                    f"actor {status.role}-{status.index} exited with code {code} before it was "
                    f"ready; its log ({status.log_path}) ends with:\n{log_tail(status.log_path)}"
                )
        if time.monotonic() > deadline:
            raise LaunchError(
                f"actors not ready after {cluster.config.ready_timeout_s:g} s: "
                f"{', '.join(cluster.not_ready())}"
            )
        await cluster.drain_control(lambda: not cluster.not_ready(), timeout=0.2)
