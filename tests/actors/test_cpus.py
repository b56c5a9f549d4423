"""Pinning built-in generators to cores of their own (`GeneratorOptions.pin_cores`): which
cores each gets, that a live generator process's threads all run there, that the option is
refused where it means nothing, and that a pinned thread goes back where it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.generator.cpus import available, cores_for, pinned_thread
from actors.generator.options import GeneratorOptions
from actors.model.options import ModelOptions
from actors.options import ConfigError
from pipeline.rollout.api import Rollout, rollout_config
from pipeline.sim import profile
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import PromptSpec, SamplingSpec


def test_each_generator_gets_its_own_cores_wrapping_round() -> None:
    cores = [4, 5, 6, 7]
    assert [cores_for(i, 1, cores) for i in range(5)] == [{4}, {5}, {6}, {7}, {4}]
    assert [cores_for(i, 2, cores) for i in range(3)] == [{4, 5}, {6, 7}, {4, 5}]
    assert cores_for(1, 3, [0, 1]) == {0, 1}  # more threads than cores: every core
    assert cores_for(1, 1) <= set(available())
    with pytest.raises(ValueError, match="threads >= 1"):
        cores_for(0, 0, cores)
    with pytest.raises(ValueError, match="no cores"):
        cores_for(0, 1, [])


def test_pin_cores_is_refused_for_servers_that_place_themselves() -> None:
    with pytest.raises(ConfigError, match="pin_cores"):
        GeneratorOptions(backend="sglang", pin_cores=True, model=ModelOptions())
    assert GeneratorOptions(pin_cores=True).pin_cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_a_pinned_thread_returns_where_it_was() -> None:
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with pinned_thread(one):
        assert os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with pinned_thread(None):
        assert os.sched_getaffinity(0) == before
    gen = {"num_threads": 1, "pin_cores": True}
    assert profile.cores(gen, 1) == cores_for(1, 1)
    assert profile.cores({**gen, "pin_cores": False}, 1) is None


def _thread_cores(pid: int) -> list[set[int]]:
    return [os.sched_getaffinity(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")]


@pytest.mark.anyio
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="no per-thread affinity")
async def test_live_generators_run_every_thread_on_their_own_core(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    gen = {**TINY_GENERATOR, "kv_budget_tokens": 2048, "pin_cores": True}
    config = rollout_config(num_generators=2, generator=gen, run_dir=str(tmp_path))
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=12)
    prompt = PromptSpec(prompt_id="q", token_ids=(3, 4, 5), forced_lens=(12, 12))
    async with Rollout(config, mode="local") as rollout:
        groups = await rollout.generate([prompt], group_size=2, sampling=sampling)
        assert [len(s.token_ids) for s in groups[0].samples] == [12, 12]  # still works
        cluster = rollout.cluster
        assert cluster is not None
        for index in range(2):
            pid = cluster.status[("generator", index)].pid
            assert pid is not None
            want = {cores[index % len(cores)]}
            seen = _thread_cores(pid)
            assert len(seen) > 1 and all(c == want for c in seen), (index, seen)
        others = [s.pid for (role, _), s in cluster.status.items() if role != "generator"]
        for pid in others:  # the control plane is left where it was
            assert pid is not None and all(c == set(cores) for c in _thread_cores(pid))
