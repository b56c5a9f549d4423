"""Launchers that run the same actor code: `launch(config, launcher=...)` picks one.

`launch_local(config)`: one OS process per actor (`seer actor ...`), sockets over ipc or
tcp. It awaits every actor's `ActorReady` (failing fast, with the actor's log tail, if one
dies first), stops them with `Stop` then SIGTERM then SIGKILL, and leaves no orphan even if
the launcher itself is killed (children get PDEATHSIG and also watch their parent pid).

`launch_inprocess(config)`: every actor as a task in the caller's event loop over
in-process channels, for embedding and tests.

`launch_ray` (pipeline/launch_ray.py): every actor a Ray actor, placed by Ray, talking
over tcp + CURVE. `launch_static` (pipeline/launch_static.py): attach to actors started by
hand or by Slurm/Kubernetes (`seer actor`), at fixed addresses or through a registry.

All yield a `Cluster`: the driver's handle to send to, call and receive from actors.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import structlog

from actors.base import AddressBook, Mailbox
from pipeline.config import CONTROL, DRIVER, PipelineConfig, save_config
from pipeline.registry import build_actor, socket_options, validate_topology, zmq_transport
from transport.channels import RecvChannel, ReplyChannel, Transport
from transport.errors import TransportError
from transport.inproc import InprocHub, InprocTransport
from transport.messages import (
    ActorReady,
    ActorStats,
    ActorStopped,
    GetStats,
    Heartbeat,
    Message,
    PeersChanged,
    Stop,
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


LAUNCHERS = ("local", "inprocess", "ray", "static")


def launch(
    config: PipelineConfig, launcher: str = "local", **kwargs: Any
) -> contextlib.AbstractAsyncContextManager[Cluster]:
    """`async with launch(config, "ray") as cluster:` one entry to every launcher; keyword
    arguments go to the launcher (e.g. `registry=` for static)."""
    if launcher == "local":
        return launch_local(config, **kwargs)
    if launcher == "inprocess":
        return launch_inprocess(config, **kwargs)
    if launcher == "ray":
        from pipeline.launch_ray import launch_ray

        return launch_ray(config, **kwargs)
    if launcher == "static":
        from pipeline.launch_static import launch_static

        return launch_static(config, **kwargs)
    raise ValueError(f"unknown launcher {launcher!r}; use one of {list(LAUNCHERS)}")


# --- one process per actor ---------------------------------------------------------------


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(
    config_path: Path, role: str, index: int, log_file: IO[bytes]
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "pipeline.cli",
        "actor",
        "--config",
        str(config_path),
        "--role",
        role,
        "--index",
        str(index),
    ]
    env = {**os.environ, "SEER_PARENT_PID": str(os.getpid()), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
    )


def _tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.asynccontextmanager
async def launch_local(config: PipelineConfig) -> AsyncIterator[Cluster]:
    """Start every actor as its own process; stop them all on exit."""
    validate_topology(config)
    run_dir = config.run_dir
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    config_path = save_config(config, run_dir / "config.toml")
    transport = zmq_transport(config)
    cluster = Cluster(config, transport)

    def spawn(path: Path, status: ActorStatus) -> None:
        status.log_path = run_dir / "logs" / f"{status.role}-{status.index}.log"
        with status.log_path.open("ab") as log_file:
            status.process = _spawn(path, status.role, status.index, log_file)

    async def restart(new: PipelineConfig, role: str) -> None:
        """Replace `role`'s processes by `new`'s (same run directory and addresses)."""
        if new.transport.scheme != "ipc" or new.run_dir != run_dir:
            raise NotImplementedError("roles restart in place over ipc in the same run dir")
        old = [s for (r, _), s in cluster.status.items() if r == role]
        await _stop_processes(cluster, old)
        await cluster.drain_control(timeout=0.2)  # their last words land on the old entries
        for s in old:
            del cluster.status[(s.role, s.index)]
        cluster.config = new
        path = save_config(new, run_dir / f"config-{role}-{time.monotonic_ns()}.toml")
        for index in range(new.topology.group(role).count):
            status = cluster.status[(role, index)] = ActorStatus(role, index)
            spawn(path, status)
        await _await_ready(cluster)

    cluster.restarter = restart
    try:
        for status in cluster.status.values():
            spawn(config_path, status)
        await _await_ready(cluster)
        log.info("cluster_ready", actors=len(cluster.status), run_dir=str(run_dir))
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_processes(cluster)
            transport.close()


async def _await_ready(cluster: Cluster) -> None:
    deadline = time.monotonic() + cluster.config.ready_timeout_s
    while cluster.not_ready():
        for status in cluster.status.values():
            code = status.process.poll() if status.process else None
            if code is not None and not status.ready:
                raise LaunchError(
                    f"actor {status.role}-{status.index} exited with code {code} before it was "
                    f"ready; its log ({status.log_path}) ends with:\n{_tail(status.log_path)}"
                )
        if time.monotonic() > deadline:
            raise LaunchError(
                f"actors not ready after {cluster.config.ready_timeout_s:g} s: "
                f"{', '.join(cluster.not_ready())}"
            )
        await cluster.drain_control(lambda: not cluster.not_ready(), timeout=0.2)


async def _stop_processes(cluster: Cluster, which: list[ActorStatus] | None = None) -> None:
    chosen = list(cluster.status.values()) if which is None else which
    procs = [s for s in chosen if s.process is not None]
    for s in procs:
        if s.process is not None and s.process.poll() is None:
            with contextlib.suppress(TransportError):
                with anyio.move_on_after(1.0):
                    await cluster.send(s.role, s.index, Stop(reason="cluster stopping"))
    await _wait_exit(procs, cluster.config.stop_timeout_s)
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        alive = [s for s in procs if s.process is not None and s.process.poll() is None]
        if not alive:
            break
        log.warning("actors_not_stopping", signal=sig.name, actors=[s.role for s in alive])
        for s in alive:
            assert s.process is not None
            s.process.send_signal(sig)
        await _wait_exit(alive, grace)


async def _wait_exit(procs: list[ActorStatus], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(s.process is None or s.process.poll() is not None for s in procs):
            return
        await anyio.sleep(0.05)


# --- all actors in one event loop ----------------------------------------------------------


@contextlib.asynccontextmanager
async def launch_inprocess(config: PipelineConfig) -> AsyncIterator[Cluster]:
    """Run every actor as a task of the caller's event loop over in-process channels."""
    validate_topology(config)
    if config.transport.scheme != "inproc":
        from dataclasses import replace

        config = replace(config, transport=replace(config.transport, scheme="inproc"))
    hub = InprocHub()
    options = socket_options(config)
    transport = InprocTransport(hub, options)
    cluster = Cluster(config, transport)
    actors = [
        build_actor(config, role, index, InprocTransport(hub, options), in_process=True)
        for role, index in cluster.status
    ]
    async with anyio.create_task_group() as tg:
        for actor in actors:
            tg.start_soon(actor.run)
        try:
            with anyio.fail_after(config.ready_timeout_s):
                await cluster.drain_control(lambda: not cluster.not_ready(), timeout=float("inf"))
            yield cluster
        finally:
            with anyio.CancelScope(shield=True):
                for role, index in cluster.status:
                    with contextlib.suppress(TransportError):
                        await cluster.send(role, index, Stop(reason="cluster stopping"))
                with anyio.move_on_after(config.stop_timeout_s) as scope:
                    await cluster.drain_control(
                        lambda: all(s.stopped for s in cluster.status.values()),
                        timeout=config.stop_timeout_s,
                    )
                if scope.cancelled_caught:
                    tg.cancel_scope.cancel()
                transport.close()
