"""The static launcher: actors started by someone else (Slurm, torchrun, Kubernetes, a
shell), one `seer actor` per host, all reading one shared config; the driver attaches.

Two ways to find each other:
- fixed addresses: the config names each actor's host (`hosts = [...]` per actor group)
  and the ports follow from `transport.base_port` (Kubernetes StatefulSets with stable pod
  names, or a fixed host list);
- a registry: a folder on a shared filesystem (NFS under Slurm). Each actor binds
  `tcp://<its host's ip>:*`, writes its address to `<registry>/<run_id>/<role>-<index>`
  (atomically), the driver writes its own two, and everyone waits until the book is
  complete. Each entry carries the launch's nonce (`launch_nonce`: `SEER_LAUNCH_ID`, or
  Slurm's job id and restart count, or torchrun's), so the entries an earlier launch of
  the same run id left (a Slurm requeue keeps its job id) are ignored, never used. Which
  actor a process is comes from `--role/--index`, or from its rank (`SEER_RANK`,
  `SLURM_PROCID`, `RANK`, `JOB_COMPLETION_INDEX`), the rank-th instance of
  the topology in order. A driver whose launch fails leaves an abort marker there, so the
  actors still waiting stop at once; an actor refuses to register a loopback address
  when its host has no route off it (`seer actor --host` names its address).

tcp always, so CURVE keys are required (`transport.curve_keys`, a folder made by
`seer keys` and copied to every host). The driver never starts or kills a process here: on
exit it sends every actor `Stop`, and the job scheduler owns the processes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio
import structlog

from pipeline.config import CONTROL, DRIVER, ConfigError, PipelineConfig
from pipeline.launch.cluster import Cluster, LaunchError, await_ready
from pipeline.launch.endpoints import AddressBook, PreboundTransport, key, node_ip, over_tcp
from pipeline.launch.registry import build_actor, validate_topology, zmq_transport
from transport.errors import TransportError
from transport.messages import Stop

log = structlog.get_logger()

ABORT = ".abort"  # the driver's marker of a failed launch, in the run's registry folder
RANK_VARIABLES = ("SEER_RANK", "SLURM_PROCID", "RANK", "JOB_COMPLETION_INDEX")


def launch_nonce(env: Mapping[str, str]) -> str:
    """What tells this launch from an earlier one of the same run id (a Slurm requeue
    keeps its job id, so its config's run id): `SEER_LAUNCH_ID` if set, else Slurm's job
    id and restart count, else torchrun's run id and restart count, else "" (then set
    `SEER_LAUNCH_ID` to the same fresh value for every process of a launch)."""
    if env.get("SEER_LAUNCH_ID"):
        return env["SEER_LAUNCH_ID"]
    if env.get("SLURM_JOB_ID"):
        return f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_RESTART_COUNT') or 0}"
    if env.get("TORCHELASTIC_RUN_ID"):
        restarts = env.get("TORCHELASTIC_RESTART_COUNT") or 0
        return f"torchrun-{env['TORCHELASTIC_RUN_ID']}.{restarts}"
    return ""


class FileRegistry:
    """Addresses of one run in a shared folder: one small file per actor, its address and
    the launch's nonce (`launch_nonce`; from the environment when None). Entries of
    another launch (stale: an earlier one of the same run id) count as missing."""

    def __init__(self, folder: str | Path, run_id: str, nonce: str | None = None) -> None:
        self.folder = Path(folder) / run_id
        self.nonce = launch_nonce(os.environ) if nonce is None else nonce

    def publish(self, role: str, index: int, address: str) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{key(role, index)}.{os.getpid()}.tmp"
        tmp.write_text(f"{address}\nlaunch={self.nonce}\n")
        tmp.replace(self.folder / key(role, index))  # atomic: readers see all or nothing

    def abort(self, reason: str) -> None:
        """Tell this launch's actors still waiting for the book that the driver gave up
        (`wait_complete` then raises at once instead of at its own timeout)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".abort.{os.getpid()}.tmp"
        tmp.write_text(f"launch={self.nonce}\n{reason}\n")
        tmp.replace(self.folder / ABORT)

    def aborted(self, since: float = 0.0) -> str | None:
        """Why the driver abandoned this launch, or None (a marker of another launch, or
        written before `since`, a `time.time()`: an earlier failed launch's is ignored)."""
        try:
            marker = self.folder / ABORT
            written = marker.stat().st_mtime
            nonce, _, reason = marker.read_text().partition("\n")
        except FileNotFoundError:
            return None
        if written < since or nonce.removeprefix("launch=") != self.nonce:
            return None
        return reason.strip()

    def entries(self) -> dict[str, str]:
        """This launch's addresses by actor key (stale entries left out)."""
        return {k: address for k, (address, nonce) in self._read().items() if nonce == self.nonce}

    def stale(self) -> list[str]:
        """The keys whose entry is another launch's."""
        return sorted(k for k, (_, nonce) in self._read().items() if nonce != self.nonce)

    def _read(self) -> dict[str, tuple[str, str]]:
        if not self.folder.is_dir():
            return {}
        out = {}
        for p in self.folder.iterdir():
            if not p.name.startswith("."):
                address, _, rest = p.read_text().strip().partition("\n")
                out[p.name] = (address.strip(), rest.strip().removeprefix("launch="))
        return out

    def missing(self, config: PipelineConfig) -> list[str]:
        wanted = [key(r, i) for r, i in config.topology.instances()]
        have = self.entries()
        return [k for k in (*wanted, key(DRIVER, 0), key(CONTROL, 0)) if k not in have]

    def wait_complete(self, config: PipelineConfig, timeout: float) -> AddressBook:
        """Block until every actor, the driver and control have registered."""
        deadline, began = time.monotonic() + timeout, time.time() - 1.0  # mtime granularity
        while missing := self.missing(config):
            if (reason := self.aborted(since=began)) is not None:
                raise LaunchError(f"registry {self.folder}: the driver gave up: {reason}")
            if time.monotonic() > deadline:
                stale = [k for k in self.stale() if k in missing]
                raise LaunchError(
                    f"registry {self.folder}: still missing {missing} after {timeout:g} s"
                    + (f" ({stale} are an earlier launch's, ignored)" if stale else "")
                )
            time.sleep(0.1)
        entries = self.entries()
        check_reachable(entries, self.folder)
        return AddressBook.complete(config, entries)


def is_loopback(address: str) -> bool:
    """Whether a `tcp://host:port` address (or a bare host) is this host's loopback."""
    import ipaddress

    host = address.removeprefix("tcp://").rpartition(":")[0] or address
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def check_reachable(entries: Mapping[str, str], where: object) -> None:
    """`LaunchError` when some registered addresses are loopback and others are not: a
    launch across hosts where those actors (or the driver) advertised an address no other
    host can reach (`seer actor --host <its address>` names the right one)."""
    loopback = sorted(k for k, address in entries.items() if is_loopback(address))
    if loopback and len(loopback) < len(entries):
        raise LaunchError(
            f"registry {where}: {loopback} registered a loopback address "
            f"({entries[loopback[0]]}) while others are on other hosts, which cannot reach "
            "it; start each with `seer actor --host <its address>` (the driver: "
            "`host=` / transport.host)"
        )


def advertised_host(host: str = "") -> str:
    """The address this host registers: `host` if given, else the address of its interface
    towards the rest of the network (`node_ip`); `LaunchError` when it has no route off the
    host (no default route: `node_ip` would say 127.0.0.1, which no other host can reach)."""
    if host:
        if is_loopback(host):
            log.warning("registry_loopback_host", host=host, reach="this host only")
        return host
    ip = node_ip()
    if is_loopback(ip):
        raise LaunchError(
            "this host has no route to other hosts (no default route), so its address for "
            "the registry is unknown: give it with `seer actor --host <this host's address>` "
            "(the driver: `host=` of launch_static)"
        )
    return ip


def rank_from_env(env: Mapping[str, str]) -> int | None:
    """This process's rank from the usual launcher variables (first one set wins)."""
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                raise ConfigError(f"{name}={value!r} is not an integer rank") from None
    return None


def actor_for_rank(config: PipelineConfig, rank: int) -> tuple[str, int]:
    """The rank-th actor of the topology (groups in order, then indices)."""
    instances = config.topology.instances()
    if not 0 <= rank < len(instances):
        raise ConfigError(
            f"rank {rank} out of range: the topology has {len(instances)} actors "
            f"({', '.join(key(r, i) for r, i in instances)})"
        )
    return instances[rank]


def run_registered_actor(
    config: PipelineConfig, role: str, index: int, registry: str | Path, host: str = ""
) -> None:
    """`seer actor --registry`: bind on this host, register, wait for the book, serve."""
    config = over_tcp(config)
    ip = advertised_host(host)  # before binding anything: a clear error, nothing to close
    transport = zmq_transport(config)
    inbox = transport.reply(f"tcp://{ip}:*", bind=True)
    files = FileRegistry(registry, config.run_id)
    files.publish(role, index, inbox.endpoint)
    log.info("actor_registered", role=role, index=index, address=inbox.endpoint)
    book = files.wait_complete(config, config.ready_timeout_s)
    actor = build_actor(
        config,
        role,
        index,
        PreboundTransport(transport, inbox),
        in_process=False,
        address_of=book,
    )
    anyio.run(actor.run)


@contextlib.asynccontextmanager
async def launch_static(
    config: PipelineConfig, *, registry: str | Path | None = None, host: str = ""
) -> AsyncIterator[Cluster]:
    """Attach to actors started elsewhere (see the module docstring); `Stop` them on exit.

    `registry`: the shared folder, or None for the fixed addresses of the config. `host`:
    the driver's address in registry mode (default: this host's outward address)."""
    validate_topology(config)
    config = over_tcp(config)
    transport = zmq_transport(config)
    if registry is None:
        cluster = Cluster(config, transport)
    else:
        files = FileRegistry(registry, config.run_id)
        try:  # a launch that fails here closes what it opened and tells the actors
            ip = advertised_host(host)
            inbox = transport.reply(f"tcp://{ip}:*", bind=True)
            control = transport.pull(f"tcp://{ip}:*", bind=True)
            files.publish(DRIVER, 0, inbox.endpoint)
            files.publish(CONTROL, 0, control.endpoint)
            book = await anyio.to_thread.run_sync(
                files.wait_complete, config, config.ready_timeout_s
            )
        except BaseException as exc:
            transport.close()
            files.abort(f"{type(exc).__name__}: {exc}".splitlines()[0])
            raise
        cluster = Cluster(config, transport, address_of=book, inbox=inbox, control=control)
    try:
        await await_ready(cluster)
        log.info("static_cluster_ready", actors=len(cluster.status))
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            for role, index in cluster.status:
                with contextlib.suppress(TransportError), anyio.move_on_after(1.0):
                    await cluster.send(role, index, Stop(reason="cluster stopping"))
            await cluster.drain_control(
                lambda: all(s.stopped for s in cluster.status.values()),
                timeout=config.stop_timeout_s,
            )
            transport.close()
