"""Hosts on one machine: Linux network namespaces on a bridge, a private subnet of their own
(10.213.<random>.0/24, nothing routed anywhere else), each actor in its own namespace with
its own address (root and iproute2 only). For the multi-host tests and the `netns` case of
`seer bench faults`: `rl_across_hosts` runs a whole `seer run` (mode "static", tcp +
CURVE) on four such hosts and SIGKILLs one host's generator mid-rollout.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from pipeline.bench.logevents import events, timestamp
from pipeline.config import PipelineConfig, build_options, load_config
from pipeline.rl.config import RunConfig
from pipeline.rl.loop import train
from transport.messages import ActorStats, GetStats
from transport.security import CurveKeys, generate_keys
from transport.sockets import SocketOptions, ZmqTransport


def netns_trouble() -> str:
    """Why namespaces cannot be made here ("" when they can be tried)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces need root and iproute2 (`ip netns`)"
    return ""


HOSTS = ("a", "b", "c")  # a: splitter, estimator, scheduler; b: generator 0; c: generator 1


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _free_net() -> int:
    """A random N with no 10.213.N.x address on this host yet: two subnets made at once (by
    two test workers) then almost never share a /24."""
    shown = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, timeout=10)
    used = {int(m) for m in re.findall(r"inet 10\.213\.(\d+)\.", shown.stdout)}
    free = [n for n in range(1, 255) if n not in used]
    return random.choice(free or [random.randrange(1, 255)])


@dataclass
class Subnet:
    """The namespaces, their veth pairs and the bridge; `close()` removes all of it."""

    hosts: tuple[str, ...] = HOSTS  # one namespace each
    tag: str = field(default_factory=lambda: f"{random.randrange(16**5):05x}")
    net: int = field(default_factory=_free_net)
    made: list[tuple[str, ...]] = field(default_factory=list)  # undo commands, newest last
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"sbr{self.tag}"

    def ns(self, host: str) -> str:
        return f"seer-{self.tag}-{host}"

    def veth(self, host: str) -> str:  # the end inside the namespace
        return f"sp{self.tag}{host}"

    def addr(self, host: str) -> str:
        last = 254 if host == "driver" else 1 + self.hosts.index(host)
        return f"10.213.{self.net}.{last}"

    def up(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", "del", self.bridge))
        _ip("addr", "add", f"{self.addr('driver')}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            ns, outer = self.ns(host), f"sv{self.tag}{host}"
            _ip("netns", "add", ns)
            self.made.append(("netns", "del", ns))  # deleting it deletes its veth pair
            _ip("link", "add", outer, "type", "veth", "peer", "name", self.veth(host))
            self.made.append(("link", "del", outer))
            _ip("link", "set", self.veth(host), "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", self.veth(host))
            _ip("-n", ns, "link", "set", self.veth(host), "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "set", outer, "master", self.bridge)
            _ip("link", "set", outer, "up")

    def start(
        self, host: str, config: Path, role: str, index: int, log: Path
    ) -> subprocess.Popen[bytes]:
        cmd = ["ip", "netns", "exec", self.ns(host), sys.executable, "-m", "pipeline.cli"]
        cmd += ["actor", "--config", str(config), "--role", role, "--index", str(index)]
        with log.open("wb") as out:  # `ip netns exec` execs: the process is the actor's
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))
        return self.procs[-1]

    def cut(self, host: str) -> None:
        _ip("-n", self.ns(host), "link", "set", self.veth(host), "down")

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(10)
        for undo in reversed(self.made):
            subprocess.run(["ip", *undo], capture_output=True, timeout=10)  # may be gone


PLACE = {  # role -> the host of each of its actors, on `rl_across_hosts`'s four hosts
    "splitter": "a",
    "estimator": "a",
    "scheduler": "a",
    "drafts": "a",
    "generator": "bc",
    "trainer": "cd",
}
RL_HOSTS = ("a", "b", "c", "d")


def run_toml(
    net: Subnet, folder: Path, task: str, model: Mapping[str, int], prompts: int, group: int
) -> Path:
    """A `seer run` TOML for `PLACE` on `net` (tcp + CURVE, two trainer ranks), as a user
    writes it for `seer run --config`: two iterations, no warm start."""
    generate_keys(folder / "keys")
    hosts = "\n".join(
        f"{role} = [{', '.join(repr(net.addr(h)) for h in where)}]" for role, where in PLACE.items()
    )
    shape = "\n".join(f"{k} = {v}" for k, v in model.items())
    text = f"""
task = "{task}"
iterations = 2
prompts_per_iteration = {prompts}
group_size = {group}
max_new_tokens = 48
chunk_size = 8
warm_start_steps = 0
eval_prompts = 0
curriculum = false
checkpoint_every = 0
trainer_ranks = 2
seed = 5
out_dir = "{folder / "run"}"
mode = "static"
run_id = "netns-{random.randrange(16**6):06x}"
ready_timeout_s = 300.0  # eight torch processes starting on a loaded 2-core host
[transport]
host = "{net.addr("driver")}"
base_port = {random.randrange(20000, 60000)}
curve_keys = "{folder / "keys"}"
run_dir = "{folder / "rundir"}"
[hosts]
{hosts}
[generator]
max_batch = 4  # a backlog: chunks queue, so the kill finds work in flight
kv_budget_tokens = 4096
[generator.model]
{shape}
[trainer]
lr = 3e-2
dist_timeout_s = 240.0
"""
    path = folder / "run.toml"
    path.write_text(text)
    return path


def write_actors_config(cfg_path: Path, out: Path) -> None:
    """`seer run --config run.toml --write-actors-config actors.toml`, as a user would."""
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "--config", str(cfg_path)]
    cmd += ["--write-actors-config", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


@dataclass
class HostsRun:
    """What `rl_across_hosts` saw: the run's config, the actors' topology (as the actors
    read it), the metrics rows, the killed generator's exit status, the seconds from the
    SIGKILL to the scheduler's `generator_lost` (None when it never logged one)."""

    cfg: RunConfig
    actors: PipelineConfig
    rows: list[dict[str, Any]]
    killed: int | None
    detect_s: float | None


async def rl_across_hosts(net: Subnet, folder: Path, toml: Path, timeout_s: float) -> HostsRun:
    """`seer run` with the TOML at `toml` on `net`'s four hosts (`PLACE`): each actor started
    in its host's namespace from the topology `--write-actors-config` wrote, the driver on
    the bridge; in iteration 1 host b's generator is SIGKILLed once it took two chunks."""
    cfg = build_options(RunConfig, tomllib.loads(toml.read_text()), str(toml))
    write_actors_config(toml, folder / "actors.toml")
    actors = load_config(folder / "actors.toml")
    procs = {}
    for role, index in actors.topology.instances():
        log = folder / f"{role}-{index}.log"
        procs[role, index] = net.start(PLACE[role][index], folder / "actors.toml", role, index, log)
    rows_seen: list[dict[str, Any]] = []
    iteration_one = anyio.Event()
    killed: list[int] = []
    hit: list[float] = []
    client = ZmqTransport(SocketOptions(curve=CurveKeys.load(Path(actors.transport.curve_keys))))

    async def stats(role: str, index: int) -> ActorStats:
        reply = await client.request(actors.address(role, index)).call(GetStats(), timeout=5)
        assert isinstance(reply, ActorStats)
        return reply

    def progress(row: dict[str, Any]) -> None:
        if "iteration" in row:
            rows_seen.append(row)
            iteration_one.set()

    async def kill_mid_rollout() -> None:
        await iteration_one.wait()
        before = (await stats("generator", 0)).counters["num_chunks"]
        while (await stats("generator", 0)).counters["num_chunks"] < before + 2:
            await anyio.sleep(0.005)
        if len(rows_seen) != 1:
            raise RuntimeError("iteration 1's rollout ended before the kill")
        procs["generator", 0].send_signal(signal.SIGKILL)
        hit.append(time.time())
        killed.append(procs["generator", 0].wait(10))

    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_mid_rollout)
                rows = await train(cfg, progress)
    finally:
        client.close()
    lost = events(folder / "scheduler-0.log", "generator_lost")
    detect = None
    if hit and lost:
        later = [timestamp(e) - hit[0] for e in lost if timestamp(e) >= hit[0] - 0.01]
        detect = round(min(later), 3) if later else None
    return HostsRun(cfg, actors, rows, killed[0] if killed else None, detect)
