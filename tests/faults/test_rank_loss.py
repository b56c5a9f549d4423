"""A trainer rank that dies or hangs mid-step fails the step within seconds (issue 14 parts
1 and 5): two trainer ranks as real processes (the local launcher, gloo, ZeroMQ), fed by
the dispatcher under the driver's rank watch (`pipeline.rl.ranks.watch_ranks`).

Before: a frozen rank (or one on a host that vanished without closing its sockets) left the
driver waiting for the train call's timeout (an hour in `seer run`) and the surviving rank
inside a collective for gloo's 300 s.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import anyio
import pytest

from actors.dispatcher.actor import Dispatcher
from actors.dispatcher.core import sample_data
from actors.dispatcher.options import DispatcherOptions
from actors.errors import RankLost
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import Cluster, launch_local
from pipeline.rl.config import free_port
from pipeline.rl.ranks import watch_ranks
from tests.actors import ranks_worker as w
from transport.messages import Ping, Pong, SamplingSpec, TrainReport

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

MODEL = {
    "vocab_size": 32, "hidden": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2,
    "intermediate": 64, "max_context": 64, "seed": 3,
}  # fmt: skip


def config(tmp_path: Path) -> PipelineConfig:
    options = {
        "model": MODEL,
        "micro_batch_size": 3,
        "num_threads": 1,
        "dist_port": free_port(),
        "dist_timeout_s": 120.0,  # joining (slow starts on a loaded host)
        "collective_timeout_s": 4.0,  # a collective whose peer hangs
    }
    group = ActorGroup(role="trainer", kind="trainer", count=2, options=options)
    return PipelineConfig(
        topology=Topology(actors=(group,)),
        transport=TransportConfig(run_dir=str(tmp_path)),
        stop_timeout_s=3.0,
    )


async def _step_and_hit(cluster: Cluster, sig: signal.Signals) -> tuple[RankLost, float]:
    """Dispatch every sample, signal rank 1, start the step; (the error, seconds to it)."""
    samples = w.samples()
    random.Random(0).shuffle(samples)
    d = Dispatcher(
        cluster.mailbox, 2, w.GROUP_SIZE, iteration=0,
        sampling=SamplingSpec(), opts=DispatcherOptions(train_timeout_s=200),
    )  # fmt: skip
    victim = cluster.status[("trainer", 1)].process
    assert victim is not None
    hit = 0.0

    async def step() -> list[TrainReport]:
        nonlocal hit
        for s in samples:
            await d.send(sample_data(s))
        # hit with its shard, as the step starts: rank 0 gets its layout and meets a dead or
        # frozen peer in the step (signalled earlier than `finish`, never after it: a step on
        # a quiet machine can end within 50 ms, and a kill after it proves nothing)
        os.kill(victim.pid, sig)
        hit = time.monotonic()
        return await d.finish()

    with pytest.raises(RankLost) as caught:
        await watch_ranks(cluster, 2, step, silent_after_s=3.0)
    return caught.value, time.monotonic() - hit


async def test_a_killed_rank_fails_the_step_naming_it(tmp_path: Path) -> None:
    async with launch_local(config(tmp_path)) as cluster:
        with anyio.fail_after(120):
            error, took = await _step_and_hit(cluster, signal.SIGKILL)
    assert error.rank == 1 and "exited" in error.reason, error
    print(f"killed rank: {error} after {took:.2f} s")
    assert took < 30  # a bound on the test (gloo's join timeout is 120 s here), not a speed claim


async def test_a_frozen_rank_fails_the_step_and_frees_the_survivor(tmp_path: Path) -> None:
    async with launch_local(config(tmp_path)) as cluster:
        victim = cluster.status[("trainer", 1)].process
        assert victim is not None
        try:
            with anyio.fail_after(120):
                error, took = await _step_and_hit(cluster, signal.SIGSTOP)
                assert error.rank == 1 and "no heartbeat" in error.reason, error
                print(f"frozen rank: {error} after {took:.2f} s")
                assert took < 30  # the driver's train call alone would wait 200 s here
                # the survivor's collective timed out: it serves again (a Ping waits
                # behind its step otherwise)
                start = time.monotonic()
                pong = await cluster.call("trainer", 0, Ping(seq=1), timeout=60)
                assert isinstance(pong, Pong)
                print(f"rank 0 free again {time.monotonic() - start:.2f} s later")
        finally:
            victim.send_signal(signal.SIGCONT)
