from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest
import torch
import zmq
import zmq.asyncio
from rich.console import Console

from examples.demo.run import demo_config, run_demo
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import LaunchError, launch_local
from transport.messages import ActorStats, GetStats, Ping, Pong

pytestmark = pytest.mark.anyio


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0): read its state
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _config(tmp_path: Path, **kw: object) -> PipelineConfig:
    config = demo_config()
    return PipelineConfig(
        topology=config.topology,
        transport=TransportConfig(run_dir=str(tmp_path)),
        heartbeat_s=0.5,
        **kw,  # type: ignore[arg-type]
    )


async def test_four_process_topology_does_real_work_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    report = await run_demo(
        config, num_batches=6, batch_size=16, dim=16, console=Console(quiet=True)
    )
    assert report.num_checked == 6
    assert sum(report.shards_per_worker.values()) == 6 * 4
    assert all(n > 0 for n in report.shards_per_worker.values())  # both workers got work
    logs = sorted(p.name for p in (config.run_dir / "logs").iterdir())
    assert logs == ["collector-0.log", "dispatcher-0.log", "worker-0.log", "worker-1.log"]
    # a clean stop leaves the logs and the config, not the ipc sockets
    assert sorted(p.name for p in config.run_dir.iterdir()) == ["config.toml", "logs"]
    out = subprocess.run(["pgrep", "-f", f"{config.run_dir}/config.toml"], capture_output=True)
    assert out.stdout == b""


async def test_garbage_frames_are_rejected_and_the_actor_keeps_serving(tmp_path: Path) -> None:
    config = _config(tmp_path)
    async with launch_local(config) as cluster:
        pids = [s.pid for s in cluster.status.values()]
        raw = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        raw.connect(config.address("worker", 0))
        try:
            await raw.send_multipart([b"", b"\x93\x01\xcd\x03\xe7\x80"])  # unknown tag 999
            await raw.send_multipart([b"", b"\xff\xfe garbage"])
            await raw.send_multipart([b""])  # truncated: no header at all
            rejected = 0
            with anyio.fail_after(10):  # the raw socket and ours are fair-queued: poll
                while rejected < 3:
                    assert await cluster.call("worker", 0, Ping(seq=3)) == Pong(seq=3)
                    stats = await cluster.call("worker", 0, GetStats())
                    assert isinstance(stats, ActorStats)
                    rejected = stats.num_rejected
        finally:
            raw.close(0)
        assert rejected == 3
    assert _wait_dead(pids, 5) == []


async def test_sigterm_stops_an_actor_gracefully(tmp_path: Path) -> None:
    async with launch_local(_config(tmp_path)) as cluster:
        status = cluster.status[("worker", 1)]
        assert status.process is not None
        status.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            await cluster.drain_control(lambda: status.stopped, timeout=10)
        assert status.process.wait(5) == 0
        assert "SIGTERM" in status.log_path.read_text()  # type: ignore[union-attr]
        assert await cluster.call("worker", 0, Ping(seq=1)) == Pong(seq=1)


async def test_an_actor_that_fails_to_start_is_reported_with_its_log(tmp_path: Path) -> None:
    group = ActorGroup(role="broken", kind="tests.actors.toys:BrokenStart")
    config = PipelineConfig(
        topology=Topology(actors=(group,)), transport=TransportConfig(run_dir=str(tmp_path))
    )
    with pytest.raises(LaunchError, match="cannot load the model file"):
        async with launch_local(config):
            pass


PARENT = textwrap.dedent(
    """
    import sys, anyio
    from pipeline.config import PipelineConfig, TransportConfig
    from examples.demo.run import demo_config
    from pipeline.launch import launch_local
    from pipeline.logs import configure_logging
    configure_logging("warning")  # logs to stderr; stdout carries only the pids
    async def main():
        config = PipelineConfig(topology=demo_config().topology,
                                transport=TransportConfig(run_dir=sys.argv[1]), heartbeat_s=0.3)
        async with launch_local(config) as cluster:
            print(" ".join(str(s.pid) for s in cluster.status.values()), flush=True)
            await anyio.sleep(600)
    anyio.run(main)
    """
)


def test_no_orphans_when_the_launcher_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE, cwd=os.getcwd()
    )
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 4 and all(_alive(p) for p in pids)
        parent.kill()
        parent.wait()
        assert _wait_dead(pids, 10) == []
    finally:
        parent.kill()


def test_seer_actor_by_hand_refuses_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[topology]\nactors = [{ role = 'w', kind = 'generator', count = 'two' }]\n")
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "actor", "--config", str(bad), "--role", "w"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "topology.actors[0].count: expected int, got str" in out.stderr


def test_torch_is_importable_in_children() -> None:
    assert torch.__version__
