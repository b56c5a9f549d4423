"""Switching the generator layout between iterations (Earl's parallelism selector, live).

`switch_layout` restarts only the generators: the launcher stops the generator processes
and starts the new layout's at the same addresses (`Cluster.restart_role`), every other
actor (splitter, estimator, scheduler, draft store, trainer ranks) stays up and is told the
new generator count (`PeersChanged`; the scheduler starts a fresh generator set), and
trainer rank 0 pushes its current weights to each new generator (`RepublishWeights`) under
the same version, so the next rollout is on-policy for exactly the weights the trainer
holds; the trainer keeps its optimiser state and version in memory. Where the launcher
cannot restart one role in place (in-process, Ray, static, tcp), the switch falls back to
saving the trainer to a checkpoint, restarting the whole topology in the new layout and
restoring every rank from the checkpoint (rank 0 re-publishes). The whole switch is timed
(seconds) and counted by the caller.

A layout is (instances, threads per instance) for the built-in engine and (servers,
`--tp-size` per server) for SGLang generators that launch their servers (`[generator.sglang]
command`, whose `{tp_size}` the layout fills in; `seer serve` reads it as intra-op threads):
the switch stops those servers with their generators and launches the new count, each with
the new tp size. Attached servers (`urls`) are not ours to relaunch: a profile is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import structlog

from pipeline.config import PipelineConfig, Topology
from pipeline.rl.config import RunConfig, launcher_options, rl_topology
from pipeline.rl.ranks import load_on_every_rank
from pipeline.rl.selector import Layout, LayoutProfile, ParallelismSelector, ProfileError
from pipeline.rollout import Rollout
from transport.messages import RepublishWeights, SaveCheckpoint, WeightsPublished

log = structlog.get_logger()


def with_layout(cfg: RunConfig, layout: Layout) -> RunConfig:
    """`cfg` with its generators in `layout` (`ProfileError` where it cannot apply)."""
    gen = cfg.generator
    if gen.backend == "sglang":
        check_relaunchable(cfg)
        sglang = dataclasses.replace(gen.sglang, tp_size=layout.threads)
        generator = dataclasses.replace(gen, sglang=sglang)
    else:
        generator = dataclasses.replace(gen, num_threads=layout.threads)
    return dataclasses.replace(cfg, num_generators=layout.instances, generator=generator)


def current_layout(cfg: RunConfig) -> Layout:
    gen = cfg.generator
    threads = gen.sglang.tp_size if gen.backend == "sglang" else gen.num_threads
    return Layout(cfg.num_generators, threads)


def check_relaunchable(cfg: RunConfig) -> None:
    """SGLang layouts need servers the generators launch with `{tp_size}` in the command."""
    sglang = cfg.generator.sglang
    if sglang.urls:
        raise ProfileError("attached SGLang servers (urls) cannot be relaunched in a new layout")
    if not any("{tp_size}" in arg for arg in sglang.command):
        raise ProfileError("the SGLang server command has no {tp_size}: a layout cannot set it")


def make_selector(cfg: RunConfig) -> ParallelismSelector | None:
    if not cfg.layout_profile:
        return None
    if cfg.generator.backend == "sglang":
        check_relaunchable(cfg)
    return ParallelismSelector(LayoutProfile.load(cfg.layout_profile), current_layout(cfg))


async def switch_layout(
    stack: contextlib.AsyncExitStack,
    rollout: Rollout,
    cfg: RunConfig,
    layout: Layout,
    model_path: str,
    iteration: int,
    version: int,
) -> tuple[Rollout, RunConfig, float]:
    """The rollout to go on with (the same one when only the generators restarted, else a
    new one entered on `stack`), its config and the switch's seconds. `version`: the weight
    version the trainer last reported (its `TrainReport`); the switch must not move it."""
    start = time.perf_counter()
    new_cfg = with_layout(cfg, layout)
    if await restart_generators(rollout, rl_topology(new_cfg, model_path)):
        return rollout, new_cfg, time.perf_counter() - start
    folder = str(Path(cfg.out_dir) / "layout-switch")
    await rollout.call_actor("trainer", SaveCheckpoint(path=folder, iteration=iteration))
    await rollout.__aexit__(None, None, None)
    new = await stack.enter_async_context(
        Rollout(
            rl_topology(new_cfg, model_path),
            mode=cfg.mode,
            launcher_options=launcher_options(cfg),
        )
    )
    report = await load_on_every_rank(new, cfg.trainer_ranks, folder)
    if report.version != version:
        raise RuntimeError(f"layout switch moved the weight version {version} -> {report.version}")
    return new, new_cfg, time.perf_counter() - start


async def restart_generators(rollout: Rollout, fresh: PipelineConfig) -> bool:
    """Replace the running generators by `fresh`'s (its generator group) and push them the
    trainer's current weights; False (nothing changed) where the launcher cannot."""
    cluster = rollout.cluster
    if cluster is None:
        raise RuntimeError("use `async with Rollout(...)` first")
    running = rollout.config
    generators = fresh.topology.group("generator")
    actors = tuple(generators if g.role == "generator" else g for g in running.topology.actors)
    config = dataclasses.replace(running, topology=Topology(actors=actors))
    try:
        await cluster.restart_role(config, "generator")
    except NotImplementedError as exc:
        log.info("layout_switch_full_restart", reason=str(exc))
        return False
    rollout.config = config
    versions = set()
    for index in range(generators.count):  # rank 0 publishes; same version, same weights
        reply = await rollout.call_actor("trainer", RepublishWeights(instance=index))
        if not isinstance(reply, WeightsPublished):
            raise RuntimeError(f"layout switch: generator {index} got {reply}")
        versions.add(reply.version)
    if len(versions) > 1:
        raise RuntimeError(f"layout switch: the new generators got versions {sorted(versions)}")
    return True
