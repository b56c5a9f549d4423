from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import torch
from structlog.testing import capture_logs

from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import launch_inprocess
from tests.actors.toys import Doubler
from transport.errors import RemoteError
from transport.messages import ActorStats, GetLoad, GetStats, Ping, Pong, Stop, TensorBlob

pytestmark = pytest.mark.anyio


def toy_config(tmp_path: Path, count: int = 2) -> PipelineConfig:
    group = ActorGroup(role="doubler", kind="tests.actors.toys:Doubler", count=count)
    return PipelineConfig(
        topology=Topology(actors=(group,)),
        transport=TransportConfig(run_dir=str(tmp_path)),
        heartbeat_s=0.2,
    )


async def test_actors_report_ready_and_serve_calls(tmp_path: Path) -> None:
    async with launch_inprocess(toy_config(tmp_path)) as cluster:
        assert cluster.not_ready() == []
        assert await cluster.call("doubler", 1, Ping(seq=7)) == Pong(seq=7)
        reply = await cluster.call("doubler", 0, TensorBlob(name="x", tensor=torch.ones(3)))
        assert isinstance(reply, TensorBlob)
        assert torch.equal(torch.as_tensor(reply.tensor), torch.full((3,), 2.0))
        stats = await cluster.call("doubler", 0, GetStats())
        assert isinstance(stats, ActorStats) and stats.counters == {"started": 1.0}


async def test_a_failing_handler_is_logged_and_the_actor_keeps_serving(tmp_path: Path) -> None:
    async with launch_inprocess(toy_config(tmp_path, count=1)) as cluster:
        with capture_logs() as logs:
            with pytest.raises(RemoteError, match="ValueError: asked to fail"):
                await cluster.call("doubler", 0, TensorBlob(name="boom", tensor=torch.ones(1)))
            with pytest.raises(RemoteError, match="Unhandled"):
                await cluster.call("doubler", 0, GetLoad())
        assert await cluster.call("doubler", 0, Ping(seq=1)) == Pong(seq=1)
        stats = await cluster.call("doubler", 0, GetStats())
        assert isinstance(stats, ActorStats)
        assert (stats.num_failed, stats.num_rejected) == (1, 1)
    failed = [e for e in logs if e["event"] == "handler_failed"]
    assert failed and failed[0]["msg_type"] == "TensorBlob" and failed[0]["actor"] == "doubler-0"
    assert any(e["event"] == "message_unhandled" for e in logs)


async def test_stop_message_runs_on_stop_and_reports_stopped(tmp_path: Path) -> None:
    config = toy_config(tmp_path, count=1)
    config = PipelineConfig(topology=config.topology, transport=TransportConfig(scheme="inproc"))
    from pipeline.launch.registry import build_actor
    from transport.inproc import InprocHub, InprocTransport

    hub = InprocHub()
    actor = build_actor(config, "doubler", 0, InprocTransport(hub), in_process=True)
    assert isinstance(actor, Doubler)
    control = InprocTransport(hub).pull(config.address("control"), bind=True)
    driver = InprocTransport(hub)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(actor.run)
            assert type(await control.recv()).__name__ == "ActorReady"
            await driver.request(config.address("doubler", 0)).send(Stop(reason="test"))
            msgs = [await control.recv()]
            while type(msgs[-1]).__name__ != "ActorStopped":
                msgs.append(await control.recv())
    assert msgs[-1].reason == "test"  # type: ignore[attr-defined]
    assert (actor.started, actor.stopped) == (1, 1)


async def test_heartbeats_reach_the_launcher(tmp_path: Path) -> None:
    async with launch_inprocess(toy_config(tmp_path, count=1)) as cluster:
        await cluster.drain_control(timeout=0.7)
        assert cluster.status[("doubler", 0)].last_heartbeat > 0
