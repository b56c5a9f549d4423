"""An environment actor killed mid-rollout (real processes): its episodes end "env_lost"
(scored 0, counted), the other environment actor's run on, no sample is lost, and the next
rollout's episodes all go to the surviving actor."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from pipeline.launch import Cluster
from pipeline.rollout.api import Group, Rollout, rollout_config
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import ActorStats, EpisodeSpec, GetStats, PromptSpec, SamplingSpec

pytestmark = pytest.mark.anyio

ENV = "tests.pipeline.multiturn_envs:make_counter_env"
TINY: dict[str, Any] = {**TINY_GENERATOR, "kv_budget_tokens": 2048, "spec": {"mode": "off"}}
SAMPLING = SamplingSpec(temperature=1.0, seed=0, ignore_eos=True, max_new_tokens=60)
EPISODE = EpisodeSpec(environment=ENV, max_turns=5, max_turn_tokens=2)


async def _counters(cluster: Cluster, role: str, index: int = 0) -> dict[str, float]:
    stats = await cluster.call(role, index, GetStats(), timeout=10)
    assert isinstance(stats, ActorStats)
    return dict(stats.counters)


def _prompts(n: int) -> list[PromptSpec]:
    info = {"step_s": 0.2}  # each step takes a while: the kill lands mid-episode
    return [PromptSpec(prompt_id=f"p{i}", token_ids=(3, i + 4), env_info=info) for i in range(n)]


async def test_killing_an_environment_actor_mid_rollout_loses_no_sample(tmp_path: Path) -> None:
    config = rollout_config(
        num_generators=1, chunk_size=2, generator=TINY, run_dir=str(tmp_path), environments=2,
        scheduler={"environment_timeout_s": 2.0, "health_interval_s": 0.2},
    )  # fmt: skip
    groups: list[Group] = []
    async with Rollout(config) as rollout:
        cluster = rollout.cluster
        assert cluster is not None

        async def run() -> None:
            groups.extend(await rollout.generate(_prompts(6), 2, SAMPLING, episode=EPISODE))

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                while (await _counters(cluster, "environment", 0)).get("steps", 0) < 1:
                    await anyio.sleep(0.05)
                proc = cluster.status[("environment", 0)].process
                assert proc is not None
                proc.send_signal(signal.SIGKILL)  # mid-rollout: it has stepped, turns remain
            after = await rollout.generate(_prompts(2), 2, SAMPLING, episode=EPISODE)
        scheduler = await _counters(cluster, "scheduler")
    samples = [s for g in groups for s in g.samples]
    assert len(samples) == 12 and len({s.request_id for s in samples}) == 12  # none lost
    reasons = [s.episode.end_reason if s.episode else "" for s in samples]
    assert set(reasons) == {"env_lost", "max_turns"}, reasons  # one actor lost, one served
    for s in samples:
        assert s.episode is not None
        if s.episode.end_reason == "env_lost":
            assert s.episode.reward == 0.0 and s.finish_reason == "stop"
        else:
            assert s.episode.reward == pytest.approx(0.25 * 5)
    assert scheduler["episodes_env_lost"] == reasons.count("env_lost")
    later = [s.episode.end_reason if s.episode else "" for g in after for s in g.samples]
    assert later == ["max_turns"] * 4  # the surviving environment actor took them all
