"""A whole RL run (`seer run` in mode "static") across four "hosts", Linux network
namespaces on a bridge (`pipeline.bench.netns`), over tcp + CURVE: splitter, estimator,
scheduler and draft store on host a, generator 0 on b, generator 1 and trainer rank 0 on
c, trainer rank 1 on d, the driver on the bridge. The actors run the topology `seer run
--write-actors-config` wrote; the two ranks meet at rank 0's host (torch.distributed over
the bridge). Iteration 0 runs whole; in iteration 1 host b's generator is SIGKILLed
mid-rollout, and every sample is still trained on once (`rl_across_hosts`, which `seer
bench faults` runs as its `netns` case). Root only (CI runs as root); skipped, saying why,
where `ip netns` is unavailable."""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.bench.netns import RL_HOSTS, Subnet, netns_trouble, rl_across_hosts, run_toml
from pipeline.config import config_to_toml
from pipeline.rl.config import rl_topology
from tests.pipeline.test_netns import make_subnet

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(bool(netns_trouble()), reason=netns_trouble() + "; CI runs as root"),
]

PROMPTS, GROUP = 4, 4
MODEL = {
    "hidden": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "intermediate": 64,
    "max_context": 64,
}


@pytest.fixture
def hosts4() -> Iterator[Subnet]:
    yield from make_subnet(Subnet(hosts=RL_HOSTS))


@pytest.mark.timeout(600)
async def test_rl_run_across_four_hosts_survives_a_killed_generator(
    hosts4: Subnet, tmp_path: Path
) -> None:
    # the task by import path: the scheduler scores it too
    path = run_toml(hosts4, tmp_path, "tests.pipeline.toytask:SaySeven", MODEL, PROMPTS, GROUP)
    run = await rl_across_hosts(hosts4, tmp_path, path, timeout_s=540.0)
    cfg, actors = run.cfg, run.actors
    driver = dataclasses.replace(rl_topology(cfg, ""), log_dir=actors.log_dir)  # run folder's
    assert config_to_toml(actors) == config_to_toml(driver)  # the driver's topology
    assert actors.transport.scheme == "tcp" and actors.run_id == cfg.run_id
    trainer = dict(actors.topology.group("trainer").options)
    assert trainer["dist_addr"] == hosts4.addr("c")  # rank 0's host is the rendezvous
    assert run.killed == -signal.SIGKILL
    assert run.detect_s is not None  # the scheduler logged the loss
    assert [r["weight_version"] for r in run.rows] == [1, 2]
    for row in run.rows:  # 0 samples lost: every sample of every group trained on, once
        assert row["num_error_samples"] == 0 and row["train_num_dropped"] == 0
        assert sum(row["samples_per_rank"]) == PROMPTS * GROUP
        assert all(n > 0 for n in row["samples_per_rank"])  # both hosts' ranks trained
        assert row["output_tokens"] > 0
    print(f"generator on host b lost after {run.detect_s} s")
