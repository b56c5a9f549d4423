"""Launching across hosts fails fast and says why: a `RunConfig` for Ray or static mode
without what it needs is a `ConfigError` naming the field; a registry entry on loopback
among other hosts' entries, or an actor on a host with no route off it (which used to
register `tcp://127.0.0.1` silently, and the driver waited out its ready timeout), is a
`LaunchError` naming `seer actor --host`."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.options import ConfigError
from pipeline.bench.netns import Subnet
from pipeline.config import TransportConfig, save_config
from pipeline.launch import LaunchError
from pipeline.launch.ray import RayResources
from pipeline.launch.static import FileRegistry, check_reachable
from pipeline.rl.config import RunConfig, launcher_options, rl_topology
from pipeline.rollout.api import rollout_config
from tests.pipeline.test_netns import make_subnet
from transport.security import generate_keys


def test_multi_host_modes_need_their_transport_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"transport\.curve_keys"):
        RunConfig(mode="ray")
    keys = TransportConfig(curve_keys=str(tmp_path / "keys"))
    with pytest.raises(ConfigError, match="fixed run_id"):
        RunConfig(mode="static", transport=keys)
    with pytest.raises(ConfigError, match="mode 'static'"):
        RunConfig(hosts={"generator": ("10.0.0.2",)})
    with pytest.raises(ValueError, match="inprocess"):
        RunConfig(mode="inprocess", trainer_ranks=2)
    cfg = RunConfig(mode="ray", transport=keys, trainer_ranks=2)  # ranks across hosts: fine
    assert cfg.trainer_ranks == 2
    shared = RayResources(gpus_per_instance=0.25)  # four instances on one GPU
    assert launcher_options(RunConfig(mode="ray", transport=keys, ray=shared)) == {
        "resources": shared
    }
    with pytest.raises(ConfigError, match=r"RunConfig\.ray .* mode 'ray', not 'local'"):
        RunConfig(ray=shared)


def test_static_topology_places_every_actor_and_meets_at_rank_zero(tmp_path: Path) -> None:
    common = {
        "task": "countdown",
        "warm_start_steps": 0,
        "mode": "static",
        "run_id": "r1",
        "transport": TransportConfig(curve_keys=str(tmp_path / "keys"), host="10.0.0.9"),
        "trainer_ranks": 2,
    }
    cfg = RunConfig(
        **common,  # type: ignore[arg-type]
        hosts={"generator": ["10.0.0.2", "10.0.0.3"], "trainer": ["10.0.0.3", "10.0.0.4"]},
    )
    assert cfg.hosts["generator"] == ("10.0.0.2", "10.0.0.3")  # a TOML array, as a tuple
    config = rl_topology(cfg, "")
    assert config.run_id == "r1" and config.transport.scheme == "tcp"
    assert config.address("trainer", 1).startswith("tcp://10.0.0.4:")
    assert config.address("scheduler").startswith("tcp://10.0.0.9:")
    assert config.topology.group("trainer").options["dist_addr"] == "10.0.0.3"
    with pytest.raises(ConfigError, match=r"RunConfig\.hosts names roles \[.trainers.\]"):
        rl_topology(RunConfig(**common, hosts={"trainers": ["h"]}), "")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"RunConfig\.hosts: .*one host per actor"):
        rl_topology(RunConfig(**common, hosts={"generator": ["h"]}), "")  # type: ignore[arg-type]
    registry = RunConfig(**common, registry=str(tmp_path / "reg"))  # type: ignore[arg-type]
    assert launcher_options(registry) == {"registry": str(tmp_path / "reg"), "host": "10.0.0.9"}
    # the ranks learn rank 0's host from the registry's address book
    assert rl_topology(registry, "").topology.group("trainer").options["dist_addr"] == ""


def test_a_loopback_entry_among_other_hosts_is_refused(tmp_path: Path) -> None:
    config = rollout_config(num_generators=1, run_id="lb", generator={"spec": {"mode": "off"}})
    files = FileRegistry(tmp_path, config.run_id, nonce="n1")
    for name, address in (
        ("driver", "tcp://10.0.0.1:5000"),
        ("control", "tcp://10.0.0.1:5001"),
        ("splitter", "tcp://10.0.0.2:5000"),
        ("estimator", "tcp://10.0.0.2:5001"),
        ("scheduler", "tcp://10.0.0.2:5002"),
        ("generator", "tcp://127.0.0.1:5000"),  # a host with no default route
    ):
        files.publish(name, 0, address)
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r"\['generator-0'\] registered a loopback.*--host"):
        files.wait_complete(config, timeout=30)
    assert time.monotonic() - start < 5  # at once, not after the ready timeout
    check_reachable({"a-0": "tcp://127.0.0.1:1", "b-0": "tcp://127.0.0.1:2"}, "one host")


@pytest.fixture
def one_host() -> Iterator[Subnet]:
    yield from make_subnet(Subnet(hosts=("a",)))


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="network namespaces need root and iproute2 (`ip netns`); CI runs as root",
)
@pytest.mark.timeout(120)
def test_an_actor_on_a_host_without_a_route_refuses_to_register(
    one_host: Subnet, tmp_path: Path
) -> None:
    """A namespace has no default route: without `--host` the actor does not register
    127.0.0.1 (which no other host can reach) but exits at once naming `--host`."""
    generate_keys(tmp_path / "keys")
    config = rollout_config(num_generators=1, run_id="noroute")
    transport = TransportConfig(scheme="tcp", curve_keys=str(tmp_path / "keys"))
    path = save_config(
        config.__class__(topology=config.topology, transport=transport, run_id="noroute"),
        tmp_path / "actors.toml",
    )
    cmd = ["ip", "netns", "exec", one_host.ns("a"), sys.executable, "-m", "pipeline.cli"]
    cmd += ["actor", "--config", str(path), "--role", "splitter", "--registry"]
    cmd += [str(tmp_path / "registry")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode != 0
    assert "no route to other hosts" in done.stderr and "--host" in done.stderr
    assert FileRegistry(tmp_path / "registry", "noroute").entries() == {}  # nothing registered


def test_the_cluster_example_writes_a_whole_rl_run(tmp_path: Path) -> None:
    """examples/cluster/make_config.py --rl (the Kubernetes example's command): a RunConfig
    whose topology puts each of the eight actors, trainer ranks included, on its pod."""
    import tomllib

    from pipeline.config import build_options

    pods = [f"seer-{i}.seer" for i in range(8)]
    cmd = [sys.executable, "examples/cluster/make_config.py", "--rl", "--keys", "/keys"]
    cmd += ["--run-id", "k8s", "--hosts", ",".join(pods), "--driver-host", "seer-driver.seer"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    cfg = build_options(RunConfig, tomllib.loads(text), "run.toml")
    assert (cfg.mode, cfg.run_id, cfg.trainer_ranks) == ("static", "k8s", 2)
    config = rl_topology(dataclasses.replace(cfg, warm_start_steps=0), "")
    placed = [config.address(r, i) for r, i in config.topology.instances()]
    assert [a.removeprefix("tcp://").rpartition(":")[0] for a in placed] == pods
    assert config.topology.group("trainer").options["dist_addr"] == "seer-6.seer"
    assert config.address("driver").startswith("tcp://seer-driver.seer:")


@pytest.mark.anyio
async def test_a_failed_registry_launch_releases_the_waiting_actors(tmp_path: Path) -> None:
    """The driver gives up (an actor never registered): the actors already waiting for the
    book hear it through the registry and stop at once, not at their own ready timeout."""
    import threading

    import anyio

    from pipeline.launch.static import launch_static

    generate_keys(tmp_path / "keys")
    base = rollout_config(num_generators=1, run_id="gaveup", generator={"spec": {"mode": "off"}})
    transport = TransportConfig(scheme="tcp", curve_keys=str(tmp_path / "keys"))
    config = dataclasses.replace(base, transport=transport, ready_timeout_s=1.0)
    waiting = FileRegistry(tmp_path / "reg", config.run_id, nonce="")
    waiting.publish("splitter", 0, "tcp://127.0.0.1:1")
    outcome: list[BaseException] = []

    def actor_waits() -> None:  # as `seer actor --registry` does, with a long timeout
        try:
            waiting.wait_complete(config, timeout=60)
        except LaunchError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=actor_waits)
    thread.start()
    start = time.monotonic()
    with pytest.raises(LaunchError, match="still missing"):
        async with launch_static(config, registry=tmp_path / "reg", host="127.0.0.1"):
            pass
    await anyio.to_thread.run_sync(thread.join, 30)
    assert time.monotonic() - start < 10
    assert len(outcome) == 1 and "the driver gave up" in str(outcome[0])


def test_ranks_meet_at_rank_zeros_host_over_the_interface_towards_it() -> None:
    """`dist_addr` "" (Ray, a registry): rank 0's host from its inbox address; gloo is
    pointed at the interface that routes there (none for loopback: one host)."""
    import socket

    from actors.trainer.actor import rank0_host
    from actors.trainer.ranks import interface_towards

    assert rank0_host("tcp://10.1.2.3:4567") == "10.1.2.3"
    assert rank0_host("tcp://[fd00::1]:4567") == "fd00::1"
    assert rank0_host("ipc:///tmp/seer/r/trainer-0") == "127.0.0.1"
    assert interface_towards("127.0.0.1") is None
    names = {name for _, name in socket.if_nameindex()}
    towards = interface_towards("10.255.255.255")  # the default route's, if there is one
    assert towards is None or towards in names


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_an_actor_with_other_keys_is_reported_as_an_authentication_failure(
    tmp_path: Path,
) -> None:
    """An actor started with another `seer keys` folder than the driver's: the launch fails
    within seconds saying CURVE authentication failed, not "actors not ready after N s"."""
    import random

    from pipeline.launch.static import launch_static

    generate_keys(tmp_path / "cluster")
    generate_keys(tmp_path / "other")
    base = rollout_config(num_generators=1, run_id="keys", generator={"spec": {"mode": "off"}})
    port = random.randrange(20000, 60000)

    def with_keys(folder: str, ready_s: float) -> Any:
        transport = TransportConfig(scheme="tcp", base_port=port, curve_keys=folder)
        return dataclasses.replace(base, transport=transport, ready_timeout_s=ready_s)

    config = with_keys(str(tmp_path / "cluster"), 90.0)
    wrong = save_config(with_keys(str(tmp_path / "other"), 90.0), tmp_path / "wrong.toml")
    cmd = [sys.executable, "-m", "pipeline.cli", "actor", "--config", str(wrong)]
    cmd += ["--role", "splitter"]
    with (tmp_path / "splitter.log").open("wb") as log:
        actor = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        start = time.monotonic()
        with pytest.raises(LaunchError, match="CURVE authentication failed") as got:
            async with launch_static(config):
                pass
        assert time.monotonic() - start < 60  # not the ready timeout (90 s)
        assert str(tmp_path / "cluster") in str(got.value)
    finally:
        actor.kill()
        actor.wait(10)
