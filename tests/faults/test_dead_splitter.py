"""The driver notices a dead splitter during the rollout, not at its next call (issue 15
part 5's fault matrix: 7.36 s, an iteration later, before): real processes, ZeroMQ, SIGKILL.
The generators are protocol-exact stand-ins that never answer, so the rollout cannot end
on its own; the scheduler is alive, so `SchedulerLost` cannot fire either."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import anyio
import pytest

from pipeline.bench.faulty import chunks_taken
from pipeline.rollout import Rollout, rollout_config
from transport.errors import PeerGone
from transport.messages import PromptSpec, SamplingSpec

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


async def test_a_dead_splitter_fails_the_rollout_at_once(tmp_path: Path) -> None:
    cfg = rollout_config(
        num_generators=2,
        generator_kind="pipeline.bench.faulty:SilentGenerator",
        run_dir=str(tmp_path),
    )
    prompts = [PromptSpec(prompt_id=f"p{i}", token_ids=(1, i + 1, 7)) for i in range(4)]
    async with Rollout(cfg) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        splitter = cluster.status[("splitter", 0)].process
        assert splitter is not None
        start = 0.0

        async def kill_soon() -> None:
            nonlocal start
            await chunks_taken(cluster)  # the rollout is running (its chunks never come back)
            start = time.monotonic()
            splitter.send_signal(signal.SIGKILL)

        with anyio.fail_after(60):  # before: the driver waited for the rollout's hour
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_soon)
                with pytest.raises(PeerGone, match="splitter-0 exited"):
                    await rollout.generate(prompts, 2, SamplingSpec(max_new_tokens=4))
        detected = time.monotonic() - start
        print(f"dead splitter noticed by the driver in {detected:.2f} s")
        assert detected < 30  # a bound on the test, not a speed claim
