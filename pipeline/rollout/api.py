"""The Rollout library API: how a trainer (ours, veRL, slime, a user's loop) uses seer-rl.

    async with Rollout(rollout_config(num_generators=2)) as rollout:
        groups = await rollout.generate(prompts, group_size=8, sampling=SamplingSpec(...))
        await rollout.update_weights(model.state_dict(), version=1)

`Rollout(config)` launches the rollout actors (splitter, estimator, scheduler, generators)
as local processes (`mode="local"`), in this event loop (`mode="inprocess"`), as Ray actors
(`mode="ray"`) or attaches to actors started elsewhere (`mode="static"`; `launcher_options`
go to the launcher, e.g. `{"registry": folder}`), and stops them on exit. `generate`
returns one `Group` per prompt, each with `group_size` samples
(token ids, logprobs, finish reason, the weight version of every chunk, timing, and for a
sample that failed the engine's reason in `error`). `update_weights` sends the state dict
to every generator in bounded buckets and publishes the version. The version belongs to
the trainer, which checks that its samples are on-policy (our trainer raises
`OffPolicyError`); `Rollout` keeps no copy of it.

Bad input fails before anything is sent (`pipeline.rollout.checks`): prompts, group size
and sampling with a `RolloutInputError` naming the prompt and the field; weights whose
names, shapes or dtypes do not fit the generators' model, or a version that does not rise
above the generators', with a `WeightsError` naming the tensor. A generator that cannot
load a publication refuses it and keeps serving its old weights: `WeightsRefused`.
Multi-turn episodes (docs/multiturn.md): `generate(..., episode=EpisodeSpec(...))` runs
every sample as an episode against environment actors (`rollout_config(environments=N)`);
each sample then carries its trajectory records in `SampleResult.episode`.
`generate` fails within seconds when no generator is alive (`GeneratorsLost`); one that
is cancelled (or times out) ends its rollout at the scheduler, so the next call runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog
import torch

from actors.drafts.options import SpecConfig
from actors.errors import OffPolicyError as OffPolicyError  # raised by the trainer
from actors.model.publish import WeightsRefused as WeightsRefused
from actors.model.publish import publish_weights
from actors.model.weight_spec import WeightsError as WeightsError
from actors.model.weight_spec import check_weights
from actors.scheduler.results import assemble
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import Cluster, launch
from pipeline.launch.backend import server_start_s
from pipeline.records.metrics import compute_metrics, save_metrics
from pipeline.records.plot import PLOT_HINT, can_plot, plot_timeline
from pipeline.records.trace import save_trace
from pipeline.rollout.checks import GeneratorModel, check_episode, check_prompts, prompt_specs
from transport.errors import PeerGone, TransportError
from transport.messages import (
    CancelRollout,
    EpisodeSpec,
    Message,
    PromptBatch,
    PromptSpec,
    RolloutFailed,
    RolloutFinished,
    RolloutPart,
    RolloutRecord,
    SampleResult,
    SamplingSpec,
    StreamSummary,
    StreamToRanks,
)


class RolloutError(RuntimeError):
    """The rollout actors could not complete a rollout."""


class SchedulerLost(RolloutError):
    """The scheduler died, went silent (no heartbeat) or failed handling a message while a
    rollout was running: the rollout cannot finish, and the driver stops waiting for it."""


class GeneratorsLost(RolloutError):
    """Every generator exited, stopped or went silent: no rollout can run."""


log = structlog.get_logger()


# Actors a run cannot continue without, besides the scheduler: when one dies during a
# rollout the driver fails at once (`PeerGone`) rather than at its next call to it, an
# iteration later. Generators, the estimator and the draft store are survivable.
ESSENTIAL_ROLES = ("splitter", "trainer")


@dataclass(frozen=True, slots=True)
class Group:
    prompt_id: str
    samples: tuple[SampleResult, ...]


@dataclass
class RolloutResult:
    """The groups of one rollout and its record (chunks, requests, engine counters)."""

    groups: list[Group]
    record: RolloutRecord
    stream: StreamSummary | None = None  # streamed to trainer ranks: rewards and layout

    def metrics(self, per_token_s: float | None = None) -> dict[str, Any]:
        """Makespan, throughput, tail, idle time, moves, re-prefills, queueing delay."""
        return compute_metrics(self.record, per_token_s=per_token_s)

    def save(self, folder: str | Path) -> dict[str, Path]:
        """Write metrics.json, trace.json (replayable) and, with matplotlib installed (the
        ``plot`` extra), timeline.png into `folder`; returns the paths written."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        record = self.record
        paths = {
            "metrics": save_metrics(self.metrics(), out / "metrics.json"),
            "trace": save_trace(record, out / "trace.json"),
        }
        if can_plot():
            paths["timeline"] = plot_timeline({record.policy: record}, out / "timeline.png")
        else:
            structlog.get_logger().info("timeline_not_drawn", hint=PLOT_HINT)
        return paths


def rollout_config(
    *,
    num_generators: int = 2,
    policy: str = "context_aware",
    chunk_size: int = 128,
    generator: Mapping[str, Any] | None = None,
    scheduler: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    run_dir: str = "",
    drafts: Mapping[str, Any] | None = None,
    generator_kind: str = "generator",
    environments: int = 0,
    environment: Mapping[str, Any] | None = None,
    estimator: Mapping[str, Any] | None = None,
) -> PipelineConfig:
    """The rollout topology: splitter, estimator, scheduler, `num_generators` generators and,
    when the generators speculate from their groups (`spec.mode` "group", the default), the
    draft-tree store (options: `drafts`). `generator_kind` swaps in another generator actor
    (an import path, e.g. the benchmarks' stand-in); only the built-in kind gets a store.
    `environments`: how many environment actors run multi-turn episodes (options:
    `environment`, `EnvironmentOptions`); 0: none, single-turn rollouts only.

    `estimator`: the length estimator's options (`EstimatorOptions`)."""
    gen_opts = dict(generator or {})
    sched_opts = {
        "policy": policy,
        "chunk_size": chunk_size,
        "max_running_per_instance": gen_opts.get("max_batch", 32),
        **(scheduler or {}),
    }
    topology = Topology(
        actors=(
            ActorGroup(role="splitter", kind="splitter"),
            ActorGroup(role="estimator", kind="estimator", options=dict(estimator or {})),
            ActorGroup(role="scheduler", kind="scheduler", options=sched_opts),
            ActorGroup(
                role="generator", kind=generator_kind, count=num_generators, options=gen_opts
            ),
        )
    )
    spec = gen_opts.get("spec", {})
    mode = spec.mode if isinstance(spec, SpecConfig) else spec.get("mode", "group")
    if generator_kind == "generator" and mode == "group":
        store = ActorGroup(role="drafts", kind="drafts", options=dict(drafts or {}))
        topology = Topology(actors=(*topology.actors, store))
    if environments:
        env = ActorGroup(
            role="environment",
            kind="environment",
            count=environments,
            options=dict(environment or {}),
        )
        topology = Topology(actors=(*topology.actors, env))
    extra: dict[str, Any] = {} if run_id is None else {"run_id": run_id}
    wait = server_start_s(gen_opts)
    if wait:  # generators that launch their server report ready once it serves
        extra["ready_timeout_s"] = max(wait, PipelineConfig.ready_timeout_s)
    return PipelineConfig(topology=topology, transport=TransportConfig(run_dir=run_dir), **extra)


class Rollout:
    """Launch (and stop) the rollout actors; generate groups; publish weights."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        mode: Literal["local", "inprocess", "ray", "static"] = "local",
        bucket_bytes: int = 16 << 20,
        timeout_s: float = 3600.0,
        scheduler_silence_s: float = 10.0,
        launcher_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.mode = mode
        self.launcher_options = dict(launcher_options or {})
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.scheduler_silence_s = scheduler_silence_s
        self.cluster: Cluster | None = None
        self._ids = itertools.count()
        self._stack = contextlib.AsyncExitStack()
        self._model: GeneratorModel | None = None  # what inputs are checked against

    @property
    def generator_model(self) -> GeneratorModel:
        """What the driver knows of the generators' model (read once, no tensor loaded)."""
        if self._model is None:
            self._model = GeneratorModel.of(self.config)
        return self._model

    async def __aenter__(self) -> Rollout:
        launched = launch(self.config, self.mode, **self.launcher_options)
        self.cluster = await self._stack.enter_async_context(launched)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cluster = None
        await self._stack.aclose()

    def _cluster(self) -> Cluster:
        if self.cluster is None:
            raise RuntimeError("use `async with Rollout(...)` first")
        return self.cluster

    async def generate(
        self,
        prompts: Sequence[Sequence[int] | PromptSpec],
        group_size: int,
        sampling: SamplingSpec | None = None,
        *,
        policy: str = "",
        episode: EpisodeSpec | None = None,
    ) -> list[Group]:
        """One group of `group_size` samples per prompt, in prompt order (`episode`: each
        sample is a multi-turn episode)."""
        result = await self.generate_with_record(
            prompts, group_size, sampling, policy=policy, episode=episode
        )
        return result.groups

    async def generate_with_record(
        self,
        prompts: Sequence[Sequence[int] | PromptSpec],
        group_size: int,
        sampling: SamplingSpec | None = None,
        *,
        policy: str = "",
        stream: StreamToRanks | None = None,
        episode: EpisodeSpec | None = None,
        sticky_turns: bool | None = None,
    ) -> RolloutResult:
        """`stream`: send each sample, scored, straight from the scheduler to the trainer
        ranks as it finishes (its `rollout_id` is filled in here); the result's samples then
        have no tokens, and `stream` says where they went. `sticky_turns`: False places
        every turn of an episode as a fresh request (None: the scheduler's option)."""
        cluster = self._cluster()
        specs = prompt_specs(prompts)
        sampling = SamplingSpec() if sampling is None else sampling
        check_prompts(specs, group_size, sampling, self.generator_model)
        if episode is not None:
            check_episode(episode, self.config)
        await cluster.poll_control()
        trouble = self._generators_trouble(cluster)
        if trouble:
            raise GeneratorsLost(f"no rollout sent: {trouble}")
        rollout_id = f"r{next(self._ids)}"
        batch = PromptBatch(
            rollout_id=rollout_id,
            prompts=specs,
            group_size=group_size,
            sampling=sampling,
            policy=policy,
            episode=episode,
            sticky_turns=sticky_turns,
        )
        failed_before = cluster.status[("scheduler", 0)].num_failed
        try:
            if stream is not None:
                announce = dataclasses.replace(stream, rollout_id=rollout_id)
                await cluster.call("scheduler", 0, announce, timeout=30)
            await cluster.call("splitter", 0, batch, timeout=30)
            msg = await self._await_result(cluster, rollout_id, failed_before)
        except BaseException as exc:  # cancelled, timed out, failed: end it at the scheduler
            if not isinstance(exc, SchedulerLost):
                await self._cancel(cluster, rollout_id)
            raise
        return RolloutResult(self._groups(specs, msg.samples), msg.record, msg.stream)

    async def _cancel(self, cluster: Cluster, rollout_id: str) -> None:
        """Tell the scheduler to end `rollout_id` (bounded, shielded: this runs while the
        caller is being cancelled), so the next rollout is not refused as overlapping."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                await cluster.call("scheduler", 0, CancelRollout(rollout_id=rollout_id), 10)
            except TransportError as exc:
                log.warning("rollout_cancel_failed", rollout=rollout_id, error=str(exc))

    def _generators_trouble(self, cluster: Cluster) -> str:
        """Why no generator is alive ("" while one looks alive)."""
        troubles = [
            cluster.trouble(role, index, self.scheduler_silence_s)
            for role, index in cluster.status
            if role == "generator"
        ]
        if troubles and all(troubles):
            return "no generator is alive (" + "; ".join(troubles) + ")"
        return ""

    async def _await_result(
        self, cluster: Cluster, rollout_id: str, failed_before: int
    ) -> RolloutFinished:
        """The rollout's result, watching the scheduler meanwhile: `SchedulerLost` within
        seconds when it dies, goes silent or fails on a message (it would never answer);
        `PeerGone` when the splitter or the trainer dies (the run could not go on). A large
        rollout's results come in bounded `RolloutPart`s first: put back together here."""
        deadline = anyio.current_time() + self.timeout_s
        parts: list[RolloutPart] = []
        while True:
            try:
                msg = await cluster.recv(timeout=0.5)
            except TimeoutError:
                if anyio.current_time() > deadline:
                    raise TimeoutError(
                        f"rollout {rollout_id} did not finish within {self.timeout_s:g} s "
                        "(Rollout's timeout_s)"
                    ) from None
                await cluster.poll_control()
                trouble = cluster.trouble("scheduler", 0, self.scheduler_silence_s)
                failed = cluster.status[("scheduler", 0)].num_failed
                if not trouble and failed > failed_before:
                    trouble = f"scheduler-0 failed handling {failed - failed_before} message(s)"
                if trouble:
                    raise SchedulerLost(f"rollout {rollout_id} abandoned: {trouble}") from None
                trouble = self._essential_trouble(cluster)
                if trouble:
                    raise PeerGone(f"rollout {rollout_id} abandoned: {trouble}") from None
                trouble = self._generators_trouble(cluster)
                if trouble:
                    raise GeneratorsLost(f"rollout {rollout_id} abandoned: {trouble}") from None
                continue
            if isinstance(msg, RolloutFailed) and msg.rollout_id == rollout_id:
                raise RolloutError(msg.reason)
            if isinstance(msg, RolloutPart) and msg.rollout_id == rollout_id:
                parts.append(msg)
            if isinstance(msg, RolloutFinished) and msg.rollout_id == rollout_id:
                return assemble(parts, msg)

    def _essential_trouble(self, cluster: Cluster) -> str:
        """Why an actor of `ESSENTIAL_ROLES` looks dead ("" when none does)."""
        for role, index in cluster.status:
            if role in ESSENTIAL_ROLES:
                trouble = cluster.trouble(role, index, self.scheduler_silence_s)
                if trouble:
                    return trouble
        return ""

    def _groups(self, specs: Sequence[PromptSpec], samples: Sequence[SampleResult]) -> list[Group]:
        """Samples by prompt. Each carries the weight version of every chunk; whether they
        are on-policy is the trainer's to check (it owns the version)."""
        by_prompt: dict[str, list[SampleResult]] = {}
        for s in samples:
            by_prompt.setdefault(s.prompt_id, []).append(s)
        return [
            Group(p.prompt_id, tuple(sorted(by_prompt[p.prompt_id], key=lambda s: s.index)))
            for p in specs
        ]

    async def call_actor(self, role: str, msg: Message, index: int = 0) -> Message:
        """Request/reply with any actor of the topology (e.g. the trainer)."""
        return await self._cluster().call(role, index, msg, timeout=self.timeout_s)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Send `state_dict` to every generator in buckets; each swaps at its next idle point.
        `WeightsError` (nothing sent) when a tensor does not fit the generators' model or
        `version` is not above theirs; `WeightsRefused` when a generator could not load it
        (it keeps serving its old weights)."""
        cluster = self._cluster()
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise WeightsError(f"weights version must be an int >= 0, got {version!r}")
        if not isinstance(state_dict, Mapping):
            kind = type(state_dict).__name__
            raise WeightsError(f"state_dict must be a mapping of names to tensors, got a {kind}")
        spec = self.generator_model.weight_spec
        if spec is not None:
            check_weights(state_dict, spec)
        count = self.config.topology.group("generator").count
        await publish_weights(
            cluster.mailbox,
            state_dict,
            version,
            num_generators=count,
            bucket_bytes=self.bucket_bytes,
            rising=True,
        )
