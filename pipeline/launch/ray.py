"""The Ray launcher: Ray places and watches the actors; the data stays on ZeroMQ.

Every actor of the topology runs inside one Ray actor (`ActorHost`). Its host binds the
actor's inbox on `tcp://<its node's ip>:*` (CURVE on, as every tcp endpoint) and reports
the address it got and the cluster's CURVE public key; the driver, once every host has
reported, hands each the address book (who listens where, the driver included), and each
then runs its actor as `seer actor` would, over ZMQ. Nothing but that book and the hosts'
reports goes through Ray; no rollout data touches Ray's object store.

Placement: generators and trainer ranks ask for a GPU each when the cluster has GPUs (and
`cpus_per_instance` of a CPU); the control actors (splitter, estimator, scheduler, draft
store, a user's own) a fraction of a CPU. One placement group per role: generator bundles
SPREAD over nodes (an instance's GPUs are one bundle, so they stay on one node), trainer
ranks PACKed, the control actors PACKed together (the draft store beside the scheduler).

Trainer ranks: with more than one "trainer" actor, the launcher supplies their
torch.distributed rendezvous (nothing fixed can name it: Ray picks the nodes). Rank 0's host
reserves a free port on its node when it binds; every rank then runs with `dist_addr` =
rank 0's node and `dist_port` = that port, whatever the topology's trainer options said.

A one-machine cluster the launcher starts itself (no address, no `RAY_ADDRESS`, no `ray
start` cluster on this machine) gets as many logical CPUs as the topology asks for, when
that is more than the machine's cores (the actors mostly wait on their sockets): `seer run
--set mode=ray` runs on a laptop. A cluster it joins is taken as it is.

Liveness: the driver `ray.wait`s on every host's `run` reference; a host whose run ends
while the cluster is up is marked lost and, when it is a generator, the scheduler hears it
at once (`PeerLost`) and re-queues its chunks, the path its own health check takes.

What it does not do: restart a lost actor (Ray's `max_restarts` stays 0: a restarted
generator would come back on a new port and with no KV; the scheduler already routes
around it), nor ship the CURVE keys: every node reads them from `transport.curve_keys`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import socket
import sys
import time
import tomllib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import structlog

from pipeline.config import (
    CONTROL,
    DRIVER,
    PipelineConfig,
    Topology,
    config_from_dict,
    config_to_toml,
)
from pipeline.launch.child import shadowing
from pipeline.launch.cluster import Cluster, LaunchError
from pipeline.launch.endpoints import AddressBook, PreboundTransport, key, over_tcp
from pipeline.launch.registry import build_actor, validate_topology, zmq_transport
from transport.errors import TransportError
from transport.messages import PeerLost, Stop

log = structlog.get_logger()

INSTANCE_ROLES = ("generator", "trainer")
"""Roles (or kinds) whose actors are instances that want an accelerator each."""

RANKS = "trainer"
"""The role whose actors are torch.distributed ranks (the trainer counts its peers by it)."""


@dataclass(frozen=True, kw_only=True)
class RayResources:
    """What each actor asks Ray for (`RunConfig.ray`, the `[ray]` table of a run)."""

    #: GPUs per generator and per trainer rank: None = 1 when the cluster has GPUs, else 0
    #: (CPU generators, as in CI); a fraction shares a GPU (e.g. 0.25: four on one)
    gpus_per_instance: float | None = None
    #: CPUs per generator and per trainer rank
    cpus_per_instance: float = 0.5
    #: CPUs per control actor (splitter, estimator, scheduler, draft store, environments)
    cpus_per_actor: float = 0.1

    def __post_init__(self) -> None:
        for name in ("cpus_per_instance", "cpus_per_actor"):
            if not 0 < getattr(self, name) <= 64:
                raise ValueError(f"RayResources.{name} must be in (0, 64]")
        if self.gpus_per_instance is not None and self.gpus_per_instance < 0:
            raise ValueError("RayResources.gpus_per_instance must be >= 0")


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise LaunchError(
            "the ray launcher needs Ray: pip install 'seer-rl[ray]' (make setup installs it)"
        ) from None
    return ray


# --- inside the Ray actor ------------------------------------------------------------------


class ActorHost:
    """One seer actor inside a Ray actor: `bind()` then `run(book)` (blocks until it stops).

    The config travels as TOML text and the book as a plain dict: nothing of ours is
    pickled by Ray beyond strings."""

    def __init__(self, config_toml: str, role: str, index: int) -> None:
        from pipeline.logs import configure_logging

        self.config = config_from_dict(tomllib.loads(config_toml), where="ray config")
        self.role, self.index = role, index
        configure_logging(self.config.log_level)
        self.transport = zmq_transport(self.config)
        self.inbox: Any = None

    def bind(self) -> dict[str, Any]:
        """Bind the inbox on this node's address; report it, the key and the pid."""
        import ray

        ip: str = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        self.inbox = self.transport.reply(f"tcp://{ip}:*", bind=True)
        curve = self.transport.options.curve
        report = {
            "address": self.inbox.endpoint,
            "public_key": curve.public.decode() if curve is not None else "",
            "node": ip,
            "pid": os.getpid(),
        }
        if (self.role, self.index) == (RANKS, 0) and _num_ranks(self.config) > 1:
            report["dist_port"] = free_port_on(ip)  # the ranks' rendezvous, on this node
        return report

    def run(self, entries: dict[str, str], rendezvous: dict[str, Any] | None = None) -> str:
        """Serve until stopped (a `Stop` from the driver); returns the stop reason.
        `rendezvous`: a trainer rank's `dist_addr` and `dist_port`, chosen by the launcher."""
        if self.inbox is None:
            raise RuntimeError("ActorHost.run before bind")
        book = AddressBook(entries)
        transport = PreboundTransport(self.transport, self.inbox)
        config = with_options(self.config, self.role, rendezvous) if rendezvous else self.config
        actor = build_actor(
            config, self.role, self.index, transport, in_process=True, address_of=book
        )
        anyio.run(actor.run)
        return actor._stop_reason


def free_port_on(ip: str) -> int:
    """A TCP port free now on this node's address `ip` (rank 0's torch.distributed store
    binds it moments later, as the local launcher's `free_port` does)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


def _num_ranks(config: PipelineConfig) -> int:
    return next((g.count for g in config.topology.actors if g.role == RANKS), 0)


def with_options(config: PipelineConfig, role: str, options: dict[str, Any]) -> PipelineConfig:
    """`config` with `options` set in `role`'s options table."""
    groups = tuple(
        dataclasses.replace(g, options={**g.options, **options}) if g.role == role else g
        for g in config.topology.actors
    )
    return dataclasses.replace(config, topology=Topology(actors=groups))


def rendezvous(reports: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """The trainer ranks' torch.distributed rendezvous: rank 0's node and the port its
    host reserved there ({} without ranks)."""
    rank0 = reports.get((RANKS, 0), {})
    if "dist_port" not in rank0:
        return {}
    return {"dist_addr": str(rank0["node"]), "dist_port": int(rank0["dist_port"])}


# --- placement -------------------------------------------------------------------------------


class Placement:
    """One placement group per role; `options(role, index)` places that actor's host."""

    def __init__(self, ray: Any, config: PipelineConfig, resources: RayResources) -> None:
        from ray.util.placement_group import placement_group

        self.ray = ray
        has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        gpus = resources.gpus_per_instance
        self.gpus = (1.0 if has_gpus else 0.0) if gpus is None else gpus
        self.resources = resources
        self.groups: dict[str, Any] = {}
        self.bundle: dict[tuple[str, int], tuple[str, int]] = {}
        control: list[dict[str, float]] = []
        for group in config.topology.actors:
            if _is_instance(group.role, group.kind):
                bundle = {"CPU": resources.cpus_per_instance}
                if self.gpus:
                    bundle["GPU"] = self.gpus
                strategy = "SPREAD" if "generator" in (group.role, group.kind) else "PACK"
                self.groups[group.role] = placement_group([bundle] * group.count, strategy)
                for i in range(group.count):
                    self.bundle[(group.role, i)] = (group.role, i)
            else:
                for i in range(group.count):
                    self.bundle[(group.role, i)] = ("control", len(control))
                    control.append({"CPU": resources.cpus_per_actor})
        if control:
            self.groups["control"] = placement_group(control, "PACK")

    async def ready(self, timeout: float) -> None:
        refs = [pg.ready() for pg in self.groups.values()]
        done = await _wait(self.ray, refs, timeout)
        if len(done) < len(refs):
            total = self.ray.cluster_resources()
            asks = f"{self.demand('CPU'):g} CPUs" + (
                f" and {self.demand('GPU'):g} GPUs" if self.gpus else ""
            )
            has = f"{total.get('CPU', 0):g} CPUs and {total.get('GPU', 0):g} GPUs"
            raise LaunchError(
                f"Ray could not place the topology within {timeout:g} s: it asks for {asks}, "
                f"the cluster has {has} in all; ask for less (RayResources: a run's [ray] "
                "table) or add nodes"
            )

    def demand(self, resource: str) -> float:
        """How much of `resource` ("CPU", "GPU") the placement groups ask for."""
        return sum(
            float(b.get(resource, 0)) for pg in self.groups.values() for b in pg.bundle_specs
        )

    def options(self, role: str, index: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group, bundle = self.bundle[(role, index)]
        instance = group != "control"
        return {
            "num_cpus": self.resources.cpus_per_instance
            if instance
            else self.resources.cpus_per_actor,
            "num_gpus": self.gpus if instance else 0,
            "max_restarts": 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=self.groups[group], placement_group_bundle_index=bundle
            ),
        }

    def remove(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self.groups.values():
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
        self.groups.clear()


def _is_instance(role: str, kind: str) -> bool:
    return role in INSTANCE_ROLES or kind in INSTANCE_ROLES


async def _wait(ray: Any, refs: list[Any], timeout: float) -> list[Any]:
    """`ray.wait` for all of `refs` in a worker thread; the ones done within `timeout`."""
    if not refs:
        return []
    done, _ = await anyio.to_thread.run_sync(
        lambda: ray.wait(refs, num_returns=len(refs), timeout=timeout)
    )
    return list(done)


# --- the driver ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def launch_ray(
    config: PipelineConfig,
    *,
    resources: RayResources | None = None,
    ray_address: str | None = None,
) -> AsyncIterator[Cluster]:
    """Place every actor of `config` on the Ray cluster (the one `ray.init` joined, else
    `ray_address`, else a new local one); yield the driver's `Cluster`; stop them all."""
    ray = _require_ray()
    validate_topology(config)
    _refuse_shadowing()
    config = over_tcp(config)
    resources = resources or RayResources()
    if not ray.is_initialized():
        init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if _starts_local_cluster(ray_address):  # enough logical CPUs to place the topology
            init["num_cpus"] = max(os.cpu_count() or 1, math.ceil(cpu_demand(config, resources)))
        ray.init(address=ray_address, **init)
    ip = ray.util.get_node_ip_address()
    transport = zmq_transport(config)
    inbox = transport.reply(f"tcp://{ip}:*", bind=True)
    control = transport.pull(f"tcp://{ip}:*", bind=True)
    placement: Placement | None = None
    hosts: dict[tuple[str, int], Any] = {}
    runs: dict[Any, tuple[str, int]] = {}
    cluster: Cluster | None = None
    try:
        placement = Placement(ray, config, resources)
        await placement.ready(config.ready_timeout_s)
        remote_host = ray.remote(ActorHost)
        text = config_to_toml(config)
        for role, index in config.topology.instances():
            options = placement.options(role, index)
            hosts[(role, index)] = remote_host.options(**options).remote(text, role, index)
        reports = await _bind_all(ray, hosts, config.ready_timeout_s)
        entries = {key(r, i): rep["address"] for (r, i), rep in reports.items()}
        entries[key(DRIVER, 0)] = inbox.endpoint
        entries[key(CONTROL, 0)] = control.endpoint
        _check_keys(transport, reports)
        book = AddressBook.complete(config, entries)
        cluster = Cluster(config, transport, address_of=book, inbox=inbox, control=control)
        for k, rep in reports.items():
            cluster.status[k].pid = rep["pid"]
        meet = rendezvous(reports)
        if meet:
            log.info("trainer_rendezvous", ranks=_num_ranks(config), **meet)
        runs = {
            hosts[k].run.remote(book.entries, meet if k[0] == RANKS else None): k for k in hosts
        }
        await _await_ready(ray, cluster, runs)
        log.info("ray_cluster_ready", actors=len(hosts), nodes=sorted(_nodes(reports)))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch, ray, cluster, runs)
            try:
                yield cluster
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(ray, cluster, hosts, runs, config.stop_timeout_s)
            if placement is not None:
                placement.remove()
            transport.close()


def _refuse_shadowing() -> None:
    """Ray starts every worker in the driver's working directory with that directory (and
    the driver script's, when on `sys.path`) first on its `sys.path`: a user's `pipeline/`
    there would be imported in every actor instead of seer-rl. Refuse it, naming it."""
    folders = [os.getcwd()]
    script_dir = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    if script_dir and script_dir in sys.path:
        folders.append(script_dir)
    found = sorted({str(p) for folder in folders for p in shadowing(folder)})
    if found:
        raise LaunchError(
            f"{', '.join(found)} would shadow seer-rl's own packages in every Ray actor (Ray "
            "puts the driver's working directory first on each worker's sys.path); start the "
            "run from another directory or rename them"
        )


def cpu_demand(config: PipelineConfig, resources: RayResources) -> float:
    """The CPUs the topology's placement groups ask for."""
    return sum(
        g.count
        * (
            resources.cpus_per_instance
            if _is_instance(g.role, g.kind)
            else resources.cpus_per_actor
        )
        for g in config.topology.actors
    )


def _starts_local_cluster(address: str | None) -> bool:
    """Whether `ray.init(address)` starts a new one-machine cluster (no address, no
    RAY_ADDRESS, no cluster of `ray start` running here) rather than join one."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray layout: let Ray size the cluster
        return False
    try:  # typed `str`, but None is what `ray.init()` itself passes (its docstring says so)
        return canonicalize_bootstrap_address(address) is None  # type: ignore[arg-type]
    except Exception:  # a bad address: `ray.init` says what is wrong with it
        return False


async def _bind_all(
    ray: Any, hosts: dict[tuple[str, int], Any], timeout: float
) -> dict[tuple[str, int], dict[str, Any]]:
    refs = {host.bind.remote(): k for k, host in hosts.items()}
    done = await _wait(ray, list(refs), timeout)
    if len(done) < len(refs):
        late = sorted(key(*refs[r]) for r in refs if r not in done)
        raise LaunchError(f"Ray actors not started within {timeout:g} s: {late}")
    out = {}
    for ref, k in refs.items():
        try:
            out[k] = ray.get(ref)
        except Exception as exc:
            raise LaunchError(f"actor {key(*k)} failed to bind: {exc}") from None
    return out


def _check_keys(transport: Any, reports: dict[tuple[str, int], dict[str, Any]]) -> None:
    """Every host must serve with the cluster's CURVE key (the one the driver holds)."""
    curve = transport.options.curve
    expected = curve.public.decode() if curve is not None else ""
    wrong = sorted(key(*k) for k, rep in reports.items() if rep["public_key"] != expected)
    if wrong:
        raise LaunchError(f"actors {wrong} hold another CURVE key than the driver's")


def _nodes(reports: dict[tuple[str, int], dict[str, Any]]) -> set[str]:
    return {str(rep["node"]) for rep in reports.values()}


def _failure(ray: Any, ref: Any) -> str:
    """Why a host's run ended: its error, or the reason it stopped."""
    try:
        return f"stopped: {ray.get(ref, timeout=1)}"
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


async def _await_ready(ray: Any, cluster: Cluster, runs: dict[Any, tuple[str, int]]) -> None:
    deadline = time.monotonic() + cluster.config.ready_timeout_s
    while cluster.not_ready():
        done, _ = ray.wait(list(runs), num_returns=len(runs), timeout=0)
        for ref in done:
            if not cluster.status[runs[ref]].ready:
                raise LaunchError(
                    f"actor {key(*runs[ref])} ended before ready: {_failure(ray, ref)}"
                )
        if time.monotonic() > deadline:
            raise LaunchError(
                f"actors not ready after {cluster.config.ready_timeout_s:g} s: "
                f"{', '.join(cluster.not_ready())}"
            )
        await cluster.drain_control(lambda: not cluster.not_ready(), timeout=0.2)


async def _watch(ray: Any, cluster: Cluster, runs: dict[Any, tuple[str, int]]) -> None:
    """Ray's liveness: a host whose run ends while the cluster is up is lost; a lost
    generator goes to the scheduler's lost-generator path at once."""
    pending = list(runs)
    while pending:
        await anyio.sleep(0.1)
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
        for ref in done:
            role, index = runs[ref]
            status = cluster.status[(role, index)]
            status.lost = True
            reason = _failure(ray, ref)
            log.error("actor_lost", role=role, index=index, reason=reason)
            if role == "generator" and not _lost(cluster, "scheduler"):
                lost = PeerLost(role=role, index=index, reason=f"Ray: {reason}")
                with contextlib.suppress(TransportError), anyio.move_on_after(2.0):
                    await cluster.send("scheduler", 0, lost)


def _lost(cluster: Cluster, role: str) -> bool:
    status = cluster.status.get((role, 0))
    return status is None or status.lost


async def _stop(
    ray: Any,
    cluster: Cluster | None,
    hosts: dict[tuple[str, int], Any],
    runs: dict[Any, tuple[str, int]],
    timeout: float,
) -> None:
    """`Stop` to every actor, then wait for their runs; whatever is left is killed."""
    if cluster is not None:
        for (role, index), status in cluster.status.items():
            if not status.lost:
                with contextlib.suppress(TransportError), anyio.move_on_after(1.0):
                    await cluster.send(role, index, Stop(reason="cluster stopping"))
    with contextlib.suppress(Exception):
        await _wait(ray, list(runs), timeout)
    for host in hosts.values():
        with contextlib.suppress(Exception):
            ray.kill(host, no_restart=True)
