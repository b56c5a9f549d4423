"""Three "machines" as Linux network namespaces on a bridge, a private test subnet of their
own (10.213.<random>.0/24, nothing routed anywhere else; `pipeline.bench.netns.Subnet`):
the rollout topology across them over tcp + CURVE through the static launcher. Root only
(CI runs as root)."""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgpack
import pytest
import zmq
import zmq.asyncio

from pipeline.bench.netns import Subnet
from pipeline.config import PipelineConfig, Topology, TransportConfig, save_config
from pipeline.rollout.api import Rollout, rollout_config
from tests.pipeline.test_rollout_integration import _reference
from tests.pipeline.tiny import TINY_GENERATOR
from transport.codec import decode
from transport.errors import PeerGone, RequestTimeout
from transport.messages import (
    ActorStats,
    ErrorReply,
    GetStats,
    Ping,
    Pong,
    PromptSpec,
    SamplingSpec,
)
from transport.security import CurveKeys, apply_curve, generate_keys
from transport.sockets import SocketOptions, ZmqTransport

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="network namespaces need root and iproute2 (`ip netns`); CI runs as root",
    ),
]


@pytest.fixture
def subnet() -> Iterator[Subnet]:
    yield from make_subnet(Subnet())


def make_subnet(net: Subnet) -> Iterator[Subnet]:
    """Bring `net` up for a test (skip where namespaces cannot be made), then remove it."""
    try:
        net.up()
    except subprocess.CalledProcessError as exc:
        net.close()
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        yield net
    finally:
        net.close()
    leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert net.tag not in leftover


def _config(net: Subnet, folder: Path) -> PipelineConfig:
    generate_keys(folder / "keys")
    base = rollout_config(
        num_generators=2,
        policy="divided",
        chunk_size=8,
        generator={**TINY_GENERATOR, "kv_budget_tokens": 4096, "spec": {"mode": "self"}},
        scheduler={"health_interval_s": 0.2, "health_timeout_s": 1.0},
    )
    where = {"generator": (net.addr("b"), net.addr("c"))}
    groups = tuple(
        dataclasses.replace(g, hosts=where.get(g.role, (net.addr("a"),) * g.count))
        for g in base.topology.actors
    )
    return PipelineConfig(
        topology=Topology(actors=groups),
        transport=TransportConfig(
            scheme="tcp",
            host=net.addr("driver"),
            base_port=random.randrange(20000, 60000),
            curve_keys=str(folder / "keys"),
            run_dir=str(folder / "run"),
        ),
        heartbeat_s=0.5,
        stop_timeout_s=3.0,
        ready_timeout_s=240.0,  # a loaded machine starts torch processes slowly
    )


async def _refused_without_the_key(config: PipelineConfig, folder: Path) -> None:
    generate_keys(folder / "intruder")
    stranger = ZmqTransport(SocketOptions(curve=CurveKeys.load(folder / "intruder")))
    try:
        with pytest.raises((PeerGone, RequestTimeout)):  # the ZAP handler refuses it
            await stranger.request(config.address("scheduler")).call(Ping(seq=1), timeout=1.5)
    finally:
        stranger.close()


async def _wrong_version_refused(config: PipelineConfig) -> ErrorReply:
    """A CURVE member that speaks protocol version 999: answered with a ProtocolError."""
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        apply_curve(sock, CurveKeys.load(config.transport.curve_keys), server=False)
        sock.connect(config.address("scheduler"))
        header = msgpack.packb([999, Ping.TAG, {"seq": 1, "payload": b""}])
        await sock.send_multipart([b"\x01" * 8, header])
        with anyio.fail_after(10):
            corr, *frames = await sock.recv_multipart()
        assert corr == b"\x01" * 8
        reply = decode(frames)
        assert isinstance(reply, ErrorReply)
        return reply
    finally:
        sock.close(0)
        ctx.term()


@pytest.mark.timeout(400)
async def test_rollout_across_namespaces_with_curve_and_a_cut_link(
    subnet: Subnet, tmp_path: Path
) -> None:
    config = _config(subnet, tmp_path)
    path = save_config(config, tmp_path / "config.toml")
    place = {"splitter": "a", "estimator": "a", "scheduler": "a", "generator": "bc"}
    for role, index in config.topology.instances():
        host = place[role][index]
        subnet.start(host, path, role, index, tmp_path / f"{role}-{index}.log")
    prompts = [
        PromptSpec(prompt_id=f"q{i}", token_ids=(3 + i, 4, 5), forced_lens=(120,) * 4)
        for i in range(3)
    ]
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=120)
    references = [_reference(p.token_ids, 120) for p in prompts]
    async with Rollout(config, mode="static", timeout_s=120) as rollout:
        cluster = rollout._cluster()
        # the rollout completes across the three hosts
        with anyio.fail_after(90):
            groups = await rollout.generate(prompts, 4, sampling)
        assert [[s.token_ids for s in g.samples] for g in groups] == [[r] * 4 for r in references]
        # a peer without the cluster key never gets past the handshake; a member does
        await _refused_without_the_key(config, tmp_path)
        assert await cluster.call("scheduler", 0, Ping(seq=2)) == Pong(seq=2)
        # a wrong protocol version is refused with a typed error, and the actor serves on
        refused = await _wrong_version_refused(config)
        assert refused.kind == "ProtocolError" and "version 999" in refused.detail
        assert await cluster.call("scheduler", 0, Ping(seq=3)) == Pong(seq=3)
        # host c's link goes down mid-rollout: its chunks are re-queued onto host b
        before = await cluster.call("generator", 1, GetStats())
        assert isinstance(before, ActorStats)

        async def cut_once_busy() -> None:
            while True:
                stats = await cluster.call("generator", 1, GetStats())
                assert isinstance(stats, ActorStats)
                if stats.counters["num_chunks"] >= before.counters["num_chunks"] + 3:
                    subnet.cut("c")
                    return
                await anyio.sleep(0.01)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(cut_once_busy)
                result = await rollout.generate_with_record(prompts, 4, sampling)
        stats = await cluster.call("scheduler", 0, GetStats())
    assert [[s.token_ids for s in g.samples] for g in result.groups] == [
        [r] * 4 for r in references
    ]
    assert isinstance(stats, ActorStats) and stats.counters["generators_lost"] == 1
    assert any(c.instance == 1 for c in result.record.chunks)  # it had work when cut
