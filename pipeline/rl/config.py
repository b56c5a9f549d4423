"""RunConfig: the knobs of one RL run, and the topology and warm start it implies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.config import ActorGroup, PipelineConfig, Topology
from pipeline.rollout.api import rollout_config
from pipeline.tasks import Task
from pipeline.tasks.warmstart import DEFAULT_STEPS, warm_start


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    task: str = "countdown"
    # 40: on the 400-step warm start (held-out about 0.75 before RL) 40 iterations added
    # +0.05 (0.746 -> 0.758 -> 0.797 at 0 / 20 / 40) in about 3 minutes on 2 cores
    iterations: int = 40
    prompts_per_iteration: int = 64  # 32 learned about half as steadily (noisier updates)
    group_size: int = 8
    max_new_tokens: int = 160
    temperature: float = 1.0
    policy: str = ""  # "" = the scheduler's default (context_aware); "baseline" for veRL-style
    chunk_size: int = 128
    num_generators: int = 2
    # 128 running slots and 2,048 prefill tokens a step: an iteration's 512 short samples run
    # in two waves of large batches, which amortise the tiny model's per-op cost (one engine,
    # 512 samples, CPU time: 1.6x the tokens per second of 32 slots and 512 prefill tokens)
    generator: GeneratorOptions = field(
        default_factory=lambda: GeneratorOptions(
            model=ModelOptions(max_context=512), max_batch=128, max_prefill_tokens=2048
        )
    )
    warm_start_steps: int = DEFAULT_STEPS  # 0 = start from the random model; leaves RL room
    curriculum: bool = True  # draw prompts where groups disagree (tasks with difficulty())
    curriculum_pool: int = 4  # candidates drawn per prompt kept
    cache_dir: str = "runs/cache"
    lr: float = 1e-3
    kl_coef: float = 0.0
    # a failed sample whose first wrong token the task locates (Task.first_error) trains on
    # that token alone (actors/trainer/batch.py); held-out 0.719 -> 0.79 in 40 iterations
    # where plain GRPO reached 0.74 (README, quick start)
    step_credit: bool = True
    micro_batch_size: int = 32
    mini_batch_size: int = 128  # optimiser steps per iteration = samples / mini_batch_size
    epochs: int = 1
    seed: int = 0
    out_dir: str = "runs/rl"
    resume: str = ""
    checkpoint_every: int = 5
    eval_prompts: int = 256  # held-out prompts scored before training and every eval_every
    eval_samples: int = 4
    eval_every: int = 20
    mode: Literal["local", "inprocess", "ray"] = "local"
    ready_timeout_s: float = 180.0  # how long the actors may take to start (a loaded machine)
    trainer_ranks: int = 1  # > 1: data-parallel ranks fed by the dispatcher (mode "local")
    # with ranks > 1: "direct" = the scheduler scores each sample and sends it to its rank
    # as it finishes (Earl); "driver" = the driver gathers, scores, then sends (comparison)
    dispatch: Literal["direct", "driver"] = "direct"
    # where the scheduler finds the task's verifier for direct dispatch: a factory taking the
    # task name (its module must register a task of your own in the scheduler's process)
    scorer: str = "pipeline.tasks.scoring:task_reward"
    layout_profile: str = ""  # a `seer bench layouts` JSON: switch generator layouts by context

    def __post_init__(self) -> None:
        for name in ("iterations", "prompts_per_iteration", "group_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"RunConfig.{name} must be >= 1")
        if self.trainer_ranks < 1:
            raise ValueError("RunConfig.trainer_ranks must be >= 1")
        if self.trainer_ranks > 1 and self.mode != "local":
            raise ValueError("RunConfig.trainer_ranks > 1 needs mode 'local' (a process per rank)")
        if self.dispatch not in ("direct", "driver"):
            raise ValueError(
                f"RunConfig.dispatch must be 'direct' or 'driver', not {self.dispatch!r}"
            )
        if self.warm_start_steps < 0:
            raise ValueError("RunConfig.warm_start_steps must be >= 0 (0: no warm start)")
        if self.policy == "oracle":  # it would silently be "fewest generated first"
            raise ValueError(
                "RunConfig.policy 'oracle' needs true output lengths, which an RL run does "
                "not have (only `seer bench rollout` forces lengths); use context_aware, "
                "divided or baseline"
            )


def generator_options(cfg: RunConfig, task: Task, model_path: str) -> GeneratorOptions:
    """The run's generator options on `task`'s vocabulary, with the model at `model_path`."""
    model = dataclasses.replace(cfg.generator.model, vocab_size=task.vocab_size, path=model_path)
    return dataclasses.replace(cfg.generator, model=model, eos_token_id=task.eos_token_id)


def options_table(options: Any) -> dict[str, Any]:
    """Options as the plain table a topology carries (None = the default)."""
    return {k: v for k, v in dataclasses.asdict(options).items() if v is not None}


def warm_model(cfg: RunConfig, task: Task, progress: Callable[[dict[str, Any]], None]) -> str:
    """The warm-started model's path (trained once, then cached), or "" for a random one."""
    if cfg.warm_start_steps == 0:
        return ""
    config = generator_options(cfg, task, "").model.config()
    path = warm_start(
        task,
        config,
        cache_dir=Path(cfg.cache_dir),
        steps=cfg.warm_start_steps,
        seed=cfg.seed,
        progress=lambda info: progress({"warm_start": info}),
    )
    return str(path)


def rl_topology(cfg: RunConfig, model_path: str, task: Task | None = None) -> PipelineConfig:
    """Splitter, estimator, scheduler, generators and the trainer, on the same model."""
    from pipeline.tasks import get_task

    gen = generator_options(cfg, task or get_task(cfg.task), model_path)
    gen_table = options_table(gen)
    base = rollout_config(
        num_generators=cfg.num_generators,
        chunk_size=cfg.chunk_size,
        generator=gen_table,
        scheduler={"scorer": cfg.scorer},  # direct dispatch scores where samples finish
    )
    trainer = ActorGroup(
        role="trainer",
        kind="trainer",
        count=cfg.trainer_ranks,
        options={
            # ranks on one host share its cores: split the trainer's threads between them
            **(
                {"dist_port": free_port(), "num_threads": max(1, 2 // cfg.trainer_ranks)}
                if cfg.trainer_ranks > 1
                else {}
            ),
            "model": gen_table["model"],
            "lr": cfg.lr,
            "kl_coef": cfg.kl_coef,
            "micro_batch_size": cfg.micro_batch_size,
            "mini_batch_size": cfg.mini_batch_size,
            "epochs": cfg.epochs,
            "pad_id": gen.eos_token_id or 0,
            "seed": cfg.seed,
        },
    )
    topology = Topology(actors=(*base.topology.actors, trainer))
    return dataclasses.replace(base, topology=topology, ready_timeout_s=cfg.ready_timeout_s)


def free_port() -> int:
    """A TCP port free now on this host (the trainer ranks' rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
