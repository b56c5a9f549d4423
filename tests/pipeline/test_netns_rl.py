"""A whole RL run (`seer run` in mode "static") across four "hosts", Linux network
namespaces on a bridge (tests/pipeline/test_netns.py's `Subnet`), over tcp + CURVE:
splitter, estimator, scheduler and draft store on host a, generator 0 on b, generator 1 and
trainer rank 0 on c, trainer rank 1 on d, the driver on the bridge. The actors run the
topology `seer run --write-actors-config` wrote; the two ranks meet at rank 0's host
(torch.distributed over the bridge). Iteration 0 runs whole; in iteration 1 host b's
generator is SIGKILLed mid-rollout, and every sample is still trained on once. Root only
(CI runs as root); skipped, saying why, where `ip netns` is unavailable."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from pipeline.config import build_options, config_to_toml, load_config
from pipeline.rl.config import RunConfig, rl_topology
from pipeline.rl.loop import train
from tests.pipeline.test_netns import Subnet, make_subnet
from transport.messages import ActorStats, GetStats
from transport.security import CurveKeys, generate_keys
from transport.sockets import SocketOptions, ZmqTransport

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="network namespaces need root and iproute2 (`ip netns`); CI runs as root",
    ),
]

PROMPTS, GROUP = 4, 4
PLACE = {  # role -> the host of each of its actors
    "splitter": "a",
    "estimator": "a",
    "scheduler": "a",
    "drafts": "a",
    "generator": "bc",
    "trainer": "cd",
}


@pytest.fixture
def hosts4() -> Iterator[Subnet]:
    yield from make_subnet(Subnet(hosts=("a", "b", "c", "d")))


def run_toml(net: Subnet, folder: Path) -> Path:
    """The run's TOML, as a user writes it for `seer run --config`."""
    generate_keys(folder / "keys")
    hosts = "\n".join(
        f"{role} = [{', '.join(repr(net.addr(h)) for h in where)}]" for role, where in PLACE.items()
    )
    text = f"""
task = "tests.pipeline.toytask:SaySeven"  # by import path: the scheduler scores it too
iterations = 2
prompts_per_iteration = {PROMPTS}
group_size = {GROUP}
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
hidden = 32
num_layers = 1
num_heads = 2
num_kv_heads = 1
intermediate = 64
max_context = 64
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


@pytest.mark.timeout(600)
async def test_rl_run_across_four_hosts_survives_a_killed_generator(
    hosts4: Subnet, tmp_path: Path
) -> None:
    path = run_toml(hosts4, tmp_path)
    cfg = build_options(RunConfig, tomllib.loads(path.read_text()), str(path))
    write_actors_config(path, tmp_path / "actors.toml")
    actors = load_config(tmp_path / "actors.toml")
    assert config_to_toml(actors) == config_to_toml(rl_topology(cfg, ""))  # the driver's
    assert actors.transport.scheme == "tcp" and actors.run_id == cfg.run_id
    trainer = dict(actors.topology.group("trainer").options)
    assert trainer["dist_addr"] == hosts4.addr("c")  # rank 0's host is the rendezvous
    procs = {}
    for role, index in actors.topology.instances():
        host = PLACE[role][index]
        log = tmp_path / f"{role}-{index}.log"
        procs[role, index] = hosts4.start(host, tmp_path / "actors.toml", role, index, log)

    rows_seen: list[dict[str, Any]] = []
    iteration_one = anyio.Event()
    killed: list[int] = []
    client = ZmqTransport(SocketOptions(curve=CurveKeys.load(tmp_path / "keys")))

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
        assert len(rows_seen) == 1  # iteration 1's rollout is under way
        procs["generator", 0].send_signal(signal.SIGKILL)
        killed.append(procs["generator", 0].wait(10))
        while (await stats("scheduler", 0)).counters["generators_lost"] < 1:
            await anyio.sleep(0.1)

    try:
        with anyio.fail_after(540):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_mid_rollout)
                rows = await train(cfg, progress)
    finally:
        client.close()
    assert killed == [-signal.SIGKILL]
    assert [r["weight_version"] for r in rows] == [1, 2]
    for row in rows:  # 0 samples lost: every sample of every group trained on, once
        assert row["num_error_samples"] == 0 and row["train_num_dropped"] == 0
        assert sum(row["samples_per_rank"]) == PROMPTS * GROUP
        assert all(n > 0 for n in row["samples_per_rank"])  # both hosts' ranks trained
        assert row["output_tokens"] > 0
