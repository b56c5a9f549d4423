"""RunConfig: the knobs of one RL run, and the topology and warm start it implies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from actors.scheduler.policy import LONG_BAND, POLICY_NAMES, PROBE_FIRST, PROBE_FIRST_RULES
from actors.trainer.options import TrainerOptions
from pipeline.config import ActorGroup, ConfigError, PipelineConfig, Topology, TransportConfig
from pipeline.launch.ray import RayResources
from pipeline.records.sinks import SINKS
from pipeline.rollout.api import rollout_config
from pipeline.tasks import Task, TaskError, supports_sft
from pipeline.tasks.warmstart import DEFAULT_STEPS, warm_start

#: the scheduling policies an RL run takes ("" = the scheduler's default, context_aware;
#: "oracle" needs true lengths, which a run does not have)
RUN_POLICIES = ("", *(name for name in POLICY_NAMES if name != "oracle"))

#: `RunConfig.trainer`'s default: the GRPO step the quick start's figures were measured with
RUN_TRAINER = TrainerOptions(lr=1e-3, micro_batch_size=32, mini_batch_size=128)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """One RL run of `seer run` (a `--config` TOML maps onto it; `[generator]` and its
    sub-tables are the generators' options, `[trainer]` the trainer's).
    docs/configuration.md lists every field."""

    #: the task to train on: a registered name (`pipeline.tasks.register_task`) or an import
    #: path "package.module:factory" of a zero-argument factory returning a Task (it may take
    #: `model_dir=`, the run's model folder); the scheduler's scorer builds the same task
    task: str = "countdown"
    #: a Hugging Face model folder (Llama 3, Qwen2, Qwen3) to start from: no warm start; the
    #: shape, dtype, vocabulary and EOS come from the folder, the task's tokenizer too
    #: (factories taking `model_dir=`); checkpoints export it with its tokenizer to `hf/`.
    #: "" = the built-in toy model, warm-started for the task
    model: str = ""
    #: RL iterations: each rolls out, scores, takes a GRPO step and publishes the weights
    iterations: int = 40
    #: prompts drawn per iteration (32 learned about half as steadily: noisier updates)
    prompts_per_iteration: int = 64
    #: samples per prompt (the GRPO group)
    group_size: int = 8
    #: generation limit per sample, in tokens
    max_new_tokens: int = 160
    #: sampling temperature of the rollouts (the trainer's logprobs use the same transform)
    temperature: float = 1.0
    #: rollout scheduling: "" = the scheduler's default (context_aware), "divided", or
    #: "baseline" (veRL-style: whole groups pinned to an instance, run to completion)
    policy: str = ""
    #: tokens per chunk for the chunked policies (divided rollout)
    chunk_size: int = 128
    #: generator processes (SGLang backend by URL: one per server)
    num_generators: int = 2
    #: environment actors for a multi-turn task (one whose `episode` is an EpisodeSpec,
    #: docs/multiturn.md); a single-turn task runs none
    num_environments: int = 1
    #: the generators' options; the default runs 128 requests at once with 2,048 prefill
    #: tokens a step, so an iteration's short samples run in large batches
    generator: GeneratorOptions = field(
        default_factory=lambda: GeneratorOptions(
            model=ModelOptions(max_context=512), max_batch=128, max_prefill_tokens=2048
        )
    )
    #: supervised warm-start optimiser steps before RL, cached under `cache_dir` (0: start
    #: from the random model)
    warm_start_steps: int = DEFAULT_STEPS
    #: draw prompts where groups disagree (tasks that grade their prompts with difficulty())
    curriculum: bool = True
    #: curriculum: candidates drawn per prompt kept
    curriculum_pool: int = 4
    #: where the warm start is cached
    cache_dir: str = "runs/cache"
    #: a failed sample whose first wrong token the task locates (`Task.first_error`) trains
    #: on that token alone (docs/seer-rollout.md, step credit); else plain GRPO
    step_credit: bool = True
    #: the trainer's options (the `[trainer]` table); the run sets its `model` (the
    #: generators'), `pad_id` (the task's EOS) and `seed` (the run's), and with
    #: `trainer_ranks` > 1 each rank's `dist_port` and `num_threads`
    trainer: TrainerOptions = field(default_factory=lambda: RUN_TRAINER)
    #: seeds the prompts, the warm start, the model and the sampling
    seed: int = 0
    #: the run folder (`seer run` sets `runs/run-<time>`)
    out_dir: str = "runs/rl"
    #: a checkpoint folder of an earlier run to continue from ("" = a new run)
    resume: str = ""
    #: iterations between checkpoints
    checkpoint_every: int = 5
    #: checkpoints kept: the latest in `checkpoint/`, the K - 1 before it in
    #: `checkpoint-<iteration>/` (older ones deleted)
    keep_checkpoints: int = 1
    #: held-out prompts scored before training and every `eval_every` iterations (0: none)
    eval_prompts: int = 256
    #: samples per held-out prompt
    eval_samples: int = 4
    #: iterations between held-out evaluations
    eval_every: int = 20
    #: how the actors start: a process each ("local"), one event loop ("inprocess"), Ray
    #: actors ("ray"), or actors started on their hosts by someone else ("static": Slurm,
    #: Kubernetes, a shell running `seer actor --config <the actors' config>`, which
    #: `seer run --config run.toml --write-actors-config actors.toml` writes); "ray" and
    #: "static" run over tcp + CURVE (`transport.curve_keys`)
    mode: Literal["local", "inprocess", "ray", "static"] = "local"
    #: the actors' sockets and security (the `[transport]` table of a topology, see
    #: `PipelineConfig`): for "ray" and "static", `curve_keys` (a folder made by `seer keys`,
    #: on every host), `host` (the driver's address), `base_port` (fixed addresses)
    transport: TransportConfig = field(default_factory=TransportConfig)
    #: mode "ray": what each actor asks Ray for (the `[ray]` table); the cluster is the one
    #: `RAY_ADDRESS` or a `ray start` on this machine names, else a new one-machine cluster
    ray: RayResources = field(default_factory=RayResources)
    #: the run id every actor's address carries: "static" needs one fixed value (the driver
    #: and the actors build the same topology from it); "" = a random one
    run_id: str = ""
    #: "static" with fixed addresses: the host of every actor by role (a `[hosts]` table,
    #: e.g. `generator = ["10.0.0.5", "10.0.0.6"]`, one per actor; roles left out use
    #: `transport.host`); trainer rank 0's host is the ranks' torch.distributed rendezvous
    #: (port `trainer.dist_port`)
    hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: "static": a folder on a shared filesystem where the actors (`seer actor --registry`)
    #: and the driver publish their addresses ("" = the fixed addresses of `hosts`)
    registry: str = ""
    #: how long the actors may take to start (a loaded machine)
    ready_timeout_s: float = 180.0
    #: trainer processes: > 1 = data-parallel ranks fed by the data dispatcher (a process
    #: each: not mode "inprocess")
    trainer_ranks: int = 1
    #: with ranks > 1: "direct" = the scheduler scores each sample and sends it to its rank
    #: as it finishes (Earl); "driver" = the driver gathers, scores, then sends (comparison)
    dispatch: Literal["direct", "driver"] = "direct"
    #: where the scheduler finds the task's verifier for direct dispatch: a factory taking
    #: the run's `task` string (the default builds it as the driver does, with `get_task`)
    scorer: str = "pipeline.tasks.scoring:task_reward"
    #: a `seer bench layouts` JSON: switch generator layouts by context length ("" = never)
    layout_profile: str = ""
    #: experiment trackers the run's figures go to besides metrics.jsonl, written into the
    #: run folder: "tensorboard" (event files in `tensorboard/`) and "wandb" (offline unless
    #: WANDB_MODE says otherwise, in `wandb/`); each is an extra (`seer-rl[wandb]`)
    report_to: tuple[str, ...] = ()
    #: iterations between tables of sample completions rendered by the task (to the
    #: trackers and `samples.jsonl`; 0 = none)
    log_samples_every: int = 10
    #: sample completions per table (sample 0 of the first prompts of the iteration)
    num_logged_samples: int = 8
    #: the length estimator starts each group at the longest output its prompt gave the last
    #: time it ran and keeps that as a floor once siblings finish (the estimator's
    #: `use_prior` with `prior_rule = "floor"`); pays from a prompt's second epoch on
    #: (docs/simulator.md, `seer sim seer --epochs`)
    length_prior: bool = True
    #: context-aware serves the groups whose length estimate is within this factor of the
    #: generation limit together, in FIFO order (as divided does), and the rest longest
    #: estimate first (the scheduler's `long_band`; 1.0 = Seer's strict longest-first). An
    #: estimate with error (the prior's) otherwise ranks some truly long groups under shorter
    #: ones, and their requests wait for KV (docs/simulator.md, `seer sim seer --epochs`)
    long_band: float = LONG_BAND
    #: when context-aware serves a group's probe (its first sample) ahead of everyone (the
    #: scheduler's `probe_first`): "always" (Seer's), "unknown" (only while the group has
    #: no length estimate: no prior, no finished sibling; otherwise ranked like its
    #: siblings), "never" (docs/simulator.md, `seer sim seer --epochs`)
    probe_first: str = PROBE_FIRST
    #: the draft store keeps each prompt's responses as drafts for its next group (the
    #: store's `keep_history`; with grouped speculation). Off by default: it pays only where
    #: prompts recur (simulated: docs/simulator.md), and the store keeps the responses of
    #: every prompt it has seen for the whole run (the default task draws fresh prompts)
    draft_history: bool = False

    def __post_init__(self) -> None:
        for name in ("iterations", "prompts_per_iteration", "group_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"RunConfig.{name} must be >= 1")
        if self.trainer_ranks < 1:
            raise ValueError("RunConfig.trainer_ranks must be >= 1")
        if self.num_environments < 1:
            raise ValueError("RunConfig.num_environments must be >= 1")
        if not self.long_band >= 1.0:
            raise ValueError(f"RunConfig.long_band must be >= 1, got {self.long_band}")
        if self.probe_first not in PROBE_FIRST_RULES:
            raise ValueError(
                f"RunConfig.probe_first must be one of {PROBE_FIRST_RULES}, "
                f"got {self.probe_first!r}"
            )
        if self.trainer_ranks > 1 and self.mode == "inprocess":
            raise ValueError(
                "RunConfig.trainer_ranks > 1 needs a process per rank: mode 'local', 'ray' or "
                "'static', not 'inprocess'"
            )
        check_multi_host(self)
        if self.dispatch not in ("direct", "driver"):
            raise ValueError(
                f"RunConfig.dispatch must be 'direct' or 'driver', not {self.dispatch!r}"
            )
        fixed = TrainerOptions()
        for name in ("model", "pad_id", "seed"):
            if getattr(self.trainer, name) != getattr(fixed, name):
                raise ValueError(
                    f"RunConfig.trainer.{name} is set by the run (the generators' model, the "
                    "task's EOS, RunConfig.seed): leave it out of [trainer]"
                )
        check_report_to(self)
        if self.warm_start_steps < 0:
            raise ValueError("RunConfig.warm_start_steps must be >= 0 (0: no warm start)")
        if self.keep_checkpoints < 1:
            raise ValueError("RunConfig.keep_checkpoints must be >= 1 (the latest)")
        if self.policy not in RUN_POLICIES and self.policy != "oracle":
            raise ValueError(
                f"RunConfig.policy {self.policy!r} is not one of {list(RUN_POLICIES)} "
                '("" = context_aware)'
            )
        if self.policy == "oracle":  # it would silently be "fewest generated first"
            raise ValueError(
                "RunConfig.policy 'oracle' needs true output lengths, which an RL run does "
                "not have (only `seer bench rollout` forces lengths); use context_aware, "
                "divided or baseline"
            )


def check_report_to(cfg: RunConfig) -> None:
    """Known sink names (whether they are installed is checked when the run starts) and
    sample-table counts >= 0; normalises `report_to` (a TOML array) to a tuple."""
    if isinstance(cfg.report_to, str) or not all(isinstance(n, str) for n in cfg.report_to):
        raise ConfigError(
            f"RunConfig.report_to must be a list of sink names, not {cfg.report_to!r}"
        )
    unknown = [n for n in cfg.report_to if n not in SINKS]
    if unknown:
        raise ConfigError(
            f"RunConfig.report_to: unknown sinks {unknown}; choose from {sorted(SINKS)}"
        )
    object.__setattr__(cfg, "report_to", tuple(cfg.report_to))
    for name in ("log_samples_every", "num_logged_samples"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"RunConfig.{name} must be >= 0")


def check_multi_host(cfg: RunConfig) -> None:
    """The transport settings a mode needs (`ConfigError` naming the field); normalises
    `hosts` (a TOML table of arrays) to tuples."""
    if not isinstance(cfg.hosts, Mapping):
        raise ConfigError(f"RunConfig.hosts must be a table of role = [hosts], not {cfg.hosts!r}")
    hosts = {}
    for role, names in cfg.hosts.items():
        if not isinstance(names, list | tuple) or not all(isinstance(h, str) for h in names):
            raise ConfigError(f"RunConfig.hosts.{role} must be an array of host names")
        hosts[role] = tuple(names)
    object.__setattr__(cfg, "hosts", hosts)
    if cfg.run_id and not cfg.run_id.replace("-", "").isalnum():
        raise ConfigError(f"RunConfig.run_id {cfg.run_id!r} must be alphanumeric (dashes allowed)")
    if cfg.mode != "ray" and cfg.ray != RayResources():
        raise ConfigError(
            f"RunConfig.ray (what actors ask Ray for) is for mode 'ray', not {cfg.mode!r}"
        )
    if cfg.mode not in ("ray", "static"):
        if hosts or cfg.registry:
            raise ConfigError(
                f"RunConfig.hosts / registry place actors on other hosts: mode 'static', not "
                f"{cfg.mode!r}"
            )
        return
    t = cfg.transport
    if t.scheme != "tcp" and not (t.curve_keys or t.allow_insecure_tcp):
        raise ConfigError(
            f"RunConfig mode {cfg.mode!r} runs over tcp, which needs transport.curve_keys (a "
            "folder made by `seer keys`, copied to every host); set "
            "transport.allow_insecure_tcp = true only on a trusted network"
        )
    if cfg.mode == "static" and not cfg.run_id:
        raise ConfigError(
            "RunConfig mode 'static' needs a fixed run_id: the driver and every actor build "
            "the same topology from it (write the actors' config with `seer run --config "
            "run.toml --write-actors-config actors.toml`)"
        )
    if cfg.mode == "ray" and (hosts or cfg.registry):
        raise ConfigError("RunConfig.hosts / registry are for mode 'static'; Ray places actors")


def generator_options(cfg: RunConfig, task: Task, model_path: str) -> GeneratorOptions:
    """The run's generator options on `task`'s vocabulary, with the model at `model_path`."""
    model = dataclasses.replace(cfg.generator.model, vocab_size=task.vocab_size, path=model_path)
    return dataclasses.replace(cfg.generator, model=model, eos_token_id=task.eos_token_id)


def task_model_dir(cfg: RunConfig) -> str | None:
    """The model folder a task factory gets as `model_dir` (where a text task finds its
    tokenizer): the run's `model`, else the generators' model path when it is a folder (a
    Hugging Face model), else None."""
    path = cfg.model or cfg.generator.model.path
    return path if path and Path(path).is_dir() else None


def options_table(options: Any) -> dict[str, Any]:
    """Options as the plain table a topology carries (None = the default)."""
    return {k: v for k, v in dataclasses.asdict(options).items() if v is not None}


def warm_model(cfg: RunConfig, task: Task, progress: Callable[[dict[str, Any]], None]) -> str:
    """The model the run starts from: its `model` folder, else the warm-started model's path
    (trained once, then cached), or "" for a random one."""
    if cfg.model:
        return cfg.model
    if cfg.warm_start_steps == 0:
        return ""
    if not supports_sft(task):
        raise TaskError(
            f"task {cfg.task!r} has no answers to warm-start on (sft_example): set "
            "RunConfig.warm_start_steps = 0 (--warm-start-steps 0)"
        )
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


def actors_config(
    cfg: RunConfig, progress: Callable[[dict[str, Any]], None] = lambda row: None
) -> PipelineConfig:
    """The topology the run's actors run (`seer run --write-actors-config`): the same the
    driver builds in `pipeline.rl.loop.train` (warm start, if any, from the shared cache)."""
    from pipeline.tasks import get_task

    task = get_task(cfg.task, model_dir=task_model_dir(cfg))
    return rl_topology(cfg, warm_model(cfg, task, progress), task)


def rl_topology(cfg: RunConfig, model_path: str, task: Task | None = None) -> PipelineConfig:
    """Splitter, estimator, scheduler, generators and the trainer, on the same model, and
    environment actors for a multi-turn task."""
    from pipeline.tasks import episode_spec, get_task

    task = task or get_task(cfg.task, model_dir=task_model_dir(cfg))
    gen = generator_options(cfg, task, model_path)
    gen_table = options_table(gen)
    base = rollout_config(
        num_generators=cfg.num_generators,
        chunk_size=cfg.chunk_size,
        generator=gen_table,
        # direct dispatch scores where samples finish
        scheduler={
            "scorer": cfg.scorer,
            "long_band": cfg.long_band,
            "probe_first": cfg.probe_first,
        },
        estimator={"use_prior": cfg.length_prior},
        drafts={"keep_history": cfg.draft_history},
        environments=cfg.num_environments if episode_spec(task) is not None else 0,
    )
    ranks = cfg.trainer_ranks
    trainer = dataclasses.replace(
        cfg.trainer, model=gen.model, pad_id=gen.eos_token_id or 0, seed=cfg.seed
    )
    if ranks > 1 and cfg.mode == "local":  # one host: split its cores, a free port
        trainer = dataclasses.replace(
            trainer, dist_port=free_port(), num_threads=max(1, 2 // ranks)
        )
    elif ranks > 1:  # across hosts: rank 0's host (fixed, or learnt from the address book)
        trainer = dataclasses.replace(trainer, dist_addr=cfg.hosts.get("trainer", ("",))[0])
    group = ActorGroup(role="trainer", kind="trainer", count=ranks, options=options_table(trainer))
    topology = Topology(actors=(*base.topology.actors, group))
    logs = str(Path(cfg.out_dir).absolute() / "logs")  # the actors' logs in the run folder
    return placed(
        dataclasses.replace(
            base, topology=topology, ready_timeout_s=cfg.ready_timeout_s, log_dir=logs
        ),
        cfg,
    )


def placed(config: PipelineConfig, cfg: RunConfig) -> PipelineConfig:
    """The run's topology with its transport, run id and (static mode) each actor's host."""
    unknown = sorted(set(cfg.hosts) - set(config.topology.roles))
    if unknown:
        raise ConfigError(
            f"RunConfig.hosts names roles {unknown} the run does not have ({config.topology.roles})"
        )
    try:
        groups = tuple(
            dataclasses.replace(g, hosts=cfg.hosts.get(g.role, g.hosts))
            for g in config.topology.actors
        )
    except ConfigError as exc:
        raise ConfigError(f"RunConfig.hosts: {exc}") from None
    transport = cfg.transport
    if cfg.mode in ("ray", "static") and transport.scheme != "tcp":
        transport = dataclasses.replace(transport, scheme="tcp")
    return dataclasses.replace(
        config,
        topology=Topology(actors=groups),
        transport=transport,
        run_id=cfg.run_id or config.run_id,
    )


def launcher_options(cfg: RunConfig) -> dict[str, Any]:
    """What the run's launcher takes beyond the topology (ray: the resources each actor
    asks for; static: the registry folder, and the driver's address: `transport.host`
    unless it is the default loopback, then this host's outward address)."""
    if cfg.mode == "ray":
        return {"resources": cfg.ray}
    if cfg.mode != "static" or not cfg.registry:
        return {}
    from pipeline.launch.static import is_loopback

    host = "" if is_loopback(cfg.transport.host) else cfg.transport.host
    return {"registry": cfg.registry, "host": host}


def free_port() -> int:
    """A TCP port free now on this host (the trainer ranks' rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
