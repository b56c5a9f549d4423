"""Launch every actor on this host: `launch_local` (one OS process per actor) and
`launch_inprocess` (every actor a task of the caller's event loop).

`launch_local(config)`: one OS process per actor (`seer actor ...`), sockets over ipc or
tcp, in a private run folder (`rundir.py`) whose sockets are removed when the run stops.
It awaits every actor's `ActorReady` (failing fast, with the actor's log tail, if one
dies first), stops them with `Stop` then SIGTERM then SIGKILL, and leaves no orphan even
if the launcher itself is killed (children get PDEATHSIG and also watch their parent pid).

`launch_inprocess(config)`: every actor as a task in the caller's event loop over
in-process channels, for embedding and tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

import anyio
import structlog

from pipeline.config import PipelineConfig, save_config
from pipeline.launch.child import actor_command, child_env
from pipeline.launch.cluster import ActorStatus, Cluster, await_ready
from pipeline.launch.registry import build_actor, socket_options, validate_topology, zmq_transport
from pipeline.launch.rundir import make_run_dir, remove_sockets
from transport.errors import TransportError
from transport.inproc import InprocHub, InprocTransport
from transport.messages import (
    Stop,
)

log = structlog.get_logger()


# --- one process per actor ---------------------------------------------------------------


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _spawn(
    config_path: Path, role: str, index: int, log_file: IO[bytes]
) -> subprocess.Popen[bytes]:
    cmd = [
        *actor_command(),  # -P: a user's pipeline/ in the working directory cannot shadow ours
        "actor",
        "--config",
        str(config_path),
        "--role",
        role,
        "--index",
        str(index),
    ]
    env = child_env({**os.environ, "SEER_PARENT_PID": str(os.getpid()), "PYTHONUNBUFFERED": "1"})
    return subprocess.Popen(
        cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent
    )


@contextlib.asynccontextmanager
async def launch_local(config: PipelineConfig) -> AsyncIterator[Cluster]:
    """Start every actor as its own process; stop them all on exit."""
    validate_topology(config)
    config.check_ipc_paths()
    run_dir = make_run_dir(config)  # private (0700): the ipc sockets rely on its mode
    config_path = save_config(config, run_dir / "config.toml")
    transport = zmq_transport(config)
    cluster = Cluster(config, transport)

    def spawn(path: Path, status: ActorStatus) -> None:
        status.log_path = config.log_folder() / f"{status.role}-{status.index}.log"
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
        await await_ready(cluster)

    cluster.restarter = restart
    try:
        for status in cluster.status.values():
            spawn(config_path, status)
        await await_ready(cluster)
        log.info("cluster_ready", actors=len(cluster.status), run_dir=str(run_dir))
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_processes(cluster)
            transport.close()
            remove_sockets(run_dir)  # every process is gone: the logs and config stay


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
