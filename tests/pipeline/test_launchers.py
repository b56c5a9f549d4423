"""The same tiny rollout through the local, Ray and static launchers gives the same samples;
Ray's liveness feeds the scheduler's lost-generator path; `seer run` on Ray with two trainer
ranks meeting where the launcher says; the static registry and ranks."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.config import ConfigError, PipelineConfig, TransportConfig, save_config
from pipeline.launch import launch
from pipeline.launch.cluster import Cluster, LaunchError
from pipeline.launch.endpoints import AddressBook, AddressBookError
from pipeline.launch.ray import (
    RayResources,
    _starts_local_cluster,
    cpu_demand,
    free_port_on,
    rendezvous,
    with_options,
)
from pipeline.launch.static import FileRegistry, actor_for_rank, launch_nonce, rank_from_env
from pipeline.rl import loop
from pipeline.rl.config import RunConfig, rl_topology
from pipeline.rollout.api import Group, Rollout, rollout_config
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import ActorStats, GetStats, PromptSpec, SamplingSpec
from transport.security import generate_keys

pytestmark = pytest.mark.anyio

PROMPTS = [PromptSpec(prompt_id=f"q{i}", token_ids=tuple(range(3 + i, 10 + i))) for i in range(3)]
SAMPLED = SamplingSpec(temperature=1.0, seed=11, max_new_tokens=24)  # a seed per sample
LONG = [
    PromptSpec(prompt_id=f"long{i}", token_ids=(3 + i, 4, 5), forced_lens=(120,) * 4)
    for i in range(3)
]
GREEDY = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=120)


def _config(folder: Path, **scheduler: Any) -> PipelineConfig:
    """Splitter, estimator, scheduler, two generators, chunks of 8; tcp + CURVE keys (the
    local launcher's ipc ignores them)."""
    keys = folder / "keys"
    if not keys.exists():
        generate_keys(keys)
    config = rollout_config(
        num_generators=2,
        chunk_size=8,
        # self-drafting: no draft store, one actor fewer to start (Ray starts 2 at a time here)
        generator={**TINY_GENERATOR, "kv_budget_tokens": 4096, "spec": {"mode": "self"}},
        run_dir=str(folder / "run"),
        scheduler=scheduler,
    )
    transport = dataclasses.replace(config.transport, curve_keys=str(keys))
    # generous start-up: six people share two cores here; CI has them to itself
    return dataclasses.replace(config, transport=transport, heartbeat_s=0.5, ready_timeout_s=240)


def _samples(groups: list[Group]) -> list[tuple[str, tuple[int, ...]]]:
    return [(s.request_id, s.token_ids) for g in groups for s in g.samples]


def _assert_same(a: list[Group], b: list[Group]) -> None:
    assert _samples(a) == _samples(b)
    for ga, gb in zip(a, b, strict=True):
        for sa, sb in zip(ga.samples, gb.samples, strict=True):
            assert sa.logprobs == pytest.approx(sb.logprobs, abs=1e-4)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Group]]:
    """The sampled and the long greedy rollout through the local launcher."""

    async def run() -> dict[str, list[Group]]:
        config = _config(tmp_path_factory.mktemp("local"))
        async with Rollout(config, mode="local") as rollout:
            return {
                "sampled": await rollout.generate(PROMPTS, 4, SAMPLED),
                "greedy": await rollout.generate(LONG, 4, GREEDY),
            }

    return anyio.run(run)


@pytest.fixture(scope="module")
def ray_session() -> Iterator[Any]:
    """One local Ray cluster for the module (its start costs about 10 s)."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed")
    ray.init(
        num_cpus=3,  # the RL run's topology: 4 x 0.1 (control) + 4 x 0.5 (instances)
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=80 << 20,
    )
    yield ray
    ray.shutdown()


@pytest.mark.timeout(600)
async def test_ray_gives_the_local_samples_and_its_liveness_requeues_a_dead_generator(
    tmp_path: Path, reference: dict[str, list[Group]], ray_session: Any
) -> None:
    # the scheduler's periodic health check is off (once a minute): Ray's liveness signal
    # (the killed host's run reference ending -> PeerLost) tells it that generator 1 is
    # gone, or at most a chunk it fails to send there; never a health probe
    config = _config(tmp_path, health_interval_s=60.0)
    async with Rollout(config, mode="ray", timeout_s=120) as rollout:
        cluster = rollout._cluster()
        assert all(cluster.address_of(r, i).startswith("tcp://") for r, i in cluster.status)
        _assert_same(await rollout.generate(PROMPTS, 4, SAMPLED), reference["sampled"])
        victim = cluster.status[("generator", 1)]
        before = await cluster.call("generator", 1, GetStats())
        assert isinstance(before, ActorStats)

        async def kill_once_busy() -> None:  # once it has finished chunks of this rollout
            while True:
                stats = await cluster.call("generator", 1, GetStats())
                assert isinstance(stats, ActorStats)
                if stats.counters["num_chunks"] >= before.counters["num_chunks"] + 3:
                    os.kill(victim.pid, signal.SIGKILL)
                    return
                await anyio.sleep(0.01)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_once_busy)
                result = await rollout.generate_with_record(LONG, 4, GREEDY)
        stats = await cluster.call("scheduler", 0, GetStats())
        assert victim.lost
    assert _samples(result.groups) == _samples(reference["greedy"])
    assert isinstance(stats, ActorStats) and stats.counters["generators_lost"] == 1
    assert any(c.instance == 1 for c in result.record.chunks)  # it had work when killed


@pytest.mark.timeout(300)
async def test_seer_run_on_ray_trains_two_ranks_and_loses_no_sample_to_a_killed_generator(
    tmp_path: Path, ray_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`seer run` in mode "ray": one whole iteration of splitter, estimator, scheduler, two
    generators, draft store and two trainer ranks (gloo), over tcp + CURVE. The ranks meet
    where the launcher says (rank 0's node, a port free there): the default port is held
    busy meanwhile. Generator 1 is SIGKILLed mid-rollout; Ray's liveness re-queues its
    chunks and every sample is trained on once, by both ranks, into identical weights."""
    generate_keys(tmp_path / "keys")
    cfg = RunConfig(
        task="tests.pipeline.toytask:SaySeven", iterations=1, prompts_per_iteration=4,
        group_size=4, max_new_tokens=48, chunk_size=8, warm_start_steps=0, eval_prompts=0,
        curriculum=False, checkpoint_every=0, trainer_ranks=2, seed=5, mode="ray",
        out_dir=str(tmp_path / "run"), ready_timeout_s=240.0,
        transport=TransportConfig(curve_keys=str(tmp_path / "keys"), run_dir=str(tmp_path)),
        generator=GeneratorOptions(  # a backlog: chunks queue, so the kill finds work
            model=ModelOptions(
                hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64,
                max_context=64,
            ),
            max_batch=4, kv_budget_tokens=4096,
        ),
    )  # fmt: skip
    seen: list[Rollout] = []

    class Spied(Rollout):  # the run's own Rollout, to watch and kill its generator
        async def __aenter__(self) -> Rollout:
            seen.append(self)
            return await super().__aenter__()

    monkeypatch.setattr(loop, "Rollout", Spied)
    killed: list[Cluster] = []

    async def kill_mid_rollout() -> None:
        while not seen or seen[0].cluster is None:
            await anyio.sleep(0.05)
        cluster = seen[0].cluster
        assert cluster is not None
        while True:  # once generator 1 has finished two chunks of the rollout
            stats = await cluster.call("generator", 1, GetStats())
            assert isinstance(stats, ActorStats)
            if stats.counters["num_chunks"] >= 2:
                break
            await anyio.sleep(0.005)
        assert not rows, "the rollout ended before the kill"
        os.kill(cluster.status[("generator", 1)].pid, signal.SIGKILL)
        killed.append(cluster)
        while True:  # the scheduler hears of it (Ray's liveness: the run reference ended)
            stats = await cluster.call("scheduler", 0, GetStats())
            assert isinstance(stats, ActorStats)
            if stats.counters["generators_lost"] == 1:
                return
            await anyio.sleep(0.05)

    rows: list[dict[str, Any]] = []  # filled as each iteration ends
    with socket.socket() as busy:  # TrainerOptions.dist_port's default, taken (or in use)
        with contextlib.suppress(OSError):  # in use already: busy all the same
            busy.bind(("", 29500))
            busy.listen()
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_mid_rollout)
                await loop.train(cfg, rows.append)
    [cluster] = killed
    assert cluster.status[("generator", 1)].lost  # Ray's liveness saw it
    [row] = rows
    assert row["weight_version"] == 1 and row["train_num_ranks"] == 2
    # 0 samples lost: every sample of every group trained on, once, by one of the ranks
    assert row["num_error_samples"] == 0 and row["train_num_dropped"] == 0
    assert sum(row["samples_per_rank"]) == 4 * 4 and all(n > 0 for n in row["samples_per_rank"])
    rank0, rank1 = row["weights_sum_per_rank"]
    assert rank0 == rank1 and rank0 is not None  # identical weights on both ranks


def test_ray_launcher_sizes_its_own_cluster_and_names_the_ranks_rendezvous(tmp_path: Path) -> None:
    keys = TransportConfig(curve_keys=str(tmp_path / "keys"))
    cfg = RunConfig(task="tests.pipeline.toytask:SaySeven", mode="ray", transport=keys,
                    trainer_ranks=2, warm_start_steps=0)  # fmt: skip
    config = rl_topology(cfg, "")
    # splitter, estimator, scheduler, draft store; two generators, two ranks
    assert cpu_demand(config, RayResources()) == pytest.approx(4 * 0.1 + 4 * 0.5)
    assert _starts_local_cluster("local") and not _starts_local_cluster("10.0.0.1:6379")
    reports = {("trainer", 0): {"node": "10.1.1.1", "dist_port": 41234}, ("trainer", 1): {}}
    meet = rendezvous(reports)
    assert meet == {"dist_addr": "10.1.1.1", "dist_port": 41234}
    assert rendezvous({("trainer", 0): {"node": "10.1.1.1"}}) == {}  # one rank: none
    ranks = with_options(config, "trainer", meet)
    assert {k: ranks.topology.group("trainer").options[k] for k in meet} == meet
    assert ranks.topology.group("scheduler") == config.topology.group("scheduler")
    port = free_port_on("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free indeed


@pytest.mark.timeout(400)
async def test_static_registry_gives_the_local_samples(
    tmp_path: Path, reference: dict[str, list[Group]]
) -> None:
    """`seer actor --registry DIR` per actor, which actor from the rank (as under srun)."""
    config = _config(tmp_path)
    path = save_config(config, tmp_path / "config.toml")
    registry = tmp_path / "registry"
    procs = []
    try:
        for rank in range(len(config.topology.instances())):
            env = {**os.environ, "SEER_RANK": str(rank)}
            cmd = [sys.executable, "-m", "pipeline.cli", "actor", "--config", str(path)]
            cmd += ["--registry", str(registry), "--host", "127.0.0.1"]
            log = (tmp_path / f"rank{rank}.log").open("wb")
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        options = {"registry": str(registry), "host": "127.0.0.1"}
        async with Rollout(config, mode="static", launcher_options=options) as rollout:
            _assert_same(await rollout.generate(PROMPTS, 4, SAMPLED), reference["sampled"])
        names = ["driver", "control", "splitter", "estimator", "scheduler", "generator"]
        expected = [f"{n}-0" for n in names] + ["generator-1"]
        assert sorted(FileRegistry(registry, config.run_id).entries()) == sorted(expected)
        assert [p.wait(90) for p in procs] == [0] * len(procs)  # Stop ends every actor
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_registry_ignores_the_entries_of_an_earlier_launch_of_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm requeue keeps the job id, so the run id: the first launch's addresses are
    still in the registry when the second starts, and must not be taken for its own."""
    config = _config(tmp_path)
    registry = tmp_path / "registry"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.delenv("SEER_LAUNCH_ID", raising=False)
    first = FileRegistry(registry, config.run_id)
    keys = [*(f"{r}-{i}" for r, i in config.topology.instances()), "driver-0", "control-0"]
    for k in keys:
        role, _, index = k.rpartition("-")
        first.publish(role, int(index), f"tcp://10.0.0.1:{1000 + len(role)}")
    assert first.missing(config) == []
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # the requeued job
    second = FileRegistry(registry, config.run_id)
    assert second.nonce != first.nonce
    assert sorted(second.missing(config)) == sorted(keys)  # stale: ignored
    with pytest.raises(LaunchError, match="an earlier launch's, ignored"):
        second.wait_complete(config, timeout=0.2)
    for k in keys:
        role, _, index = k.rpartition("-")
        second.publish(role, int(index), f"tcp://10.0.0.2:{2000 + int(index)}")
    book = second.wait_complete(config, timeout=1.0)
    assert book("scheduler", 0) == "tcp://10.0.0.2:2000"
    assert sorted(first.missing(config)) == sorted(keys)  # and the reverse
    monkeypatch.setenv("SEER_LAUNCH_ID", "mine")
    assert launch_nonce(os.environ) == "mine"


def test_ranks_name_actors_in_topology_order(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert rank_from_env({"SLURM_PROCID": "4", "RANK": "0"}) == 4
    assert rank_from_env({}) is None
    with pytest.raises(ConfigError, match="not an integer"):
        rank_from_env({"SEER_RANK": "x"})
    assert [actor_for_rank(config, r) for r in (0, 2, 3, 4)] == [
        ("splitter", 0),
        ("scheduler", 0),
        ("generator", 0),
        ("generator", 1),
    ]
    with pytest.raises(ConfigError, match="rank 5 out of range"):
        actor_for_rank(config, 5)
    with pytest.raises(AddressBookError, match="lacks"):
        AddressBook.complete(config, {"splitter-0": "tcp://127.0.0.1:1"})


async def test_tcp_launchers_refuse_a_config_without_curve_keys(tmp_path: Path) -> None:
    config = rollout_config(num_generators=1, run_dir=str(tmp_path))
    with pytest.raises(ConfigError, match="curve_keys"):
        async with launch(config, "static"):
            pass
    with pytest.raises(ValueError, match="unknown launcher"):
        launch(config, "slurm")
