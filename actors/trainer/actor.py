"""TrainerActor: GRPO updates on scored samples, then versioned weights to the generators.

Consumes `TrainStep` (driver: the samples of one iteration with their rewards and the weight
version they must carry; a large iteration's samples come ahead of it in bounded
`TrainSamples` calls, held until its step), `SaveCheckpoint`, `LoadCheckpoint`. A
`TrainStep` runs one `GRPOTrainer.step` in a worker thread (an off-policy sample refuses the
whole step before anything changes; the caller gets the error), publishes the new weights to
every generator in bounded tensor buckets and the version to the scheduler, and answers with
a `TrainReport`. The model is built from the `model` option by `build_model`, exactly as the
generators build theirs; with `kl_coef > 0` a frozen copy of it is the KL reference. A step
that fails part-way (`TrainStepError`: a non-finite loss, a lost rank) leaves the weights
and version of before it (see `GRPOTrainer`) and publishes nothing; without
`restore_on_failure` the trainer then refuses to step, publish or save until a
`LoadCheckpoint` restores it.

Trainer ranks: with R "trainer" actors in the topology (or under torchrun, whose
environment wins) each actor is one rank of a torch.distributed group (gloo on CPU, NCCL on
GPU; rank = the actor's index). Samples then arrive from the data dispatcher
(`SampleDispatched` and `GroupAdvantages`, one-way, buffered in a `ShardBuffer`); the
`ShardEnd` call closes the rank's shard (answered with `ShardHeld` once it is complete);
the `ShardLayout` call then starts the data-parallel step
(`RankedGRPOTrainer.step_shard`); only rank 0 publishes weights. A rank whose shard does not
match its layout fails the step on every rank (the ranks agree before training). Every rank
loads a checkpoint; rank 0 saves them.

`RepublishWeights` (scheduler, a call): a generator that missed a publication answers
again; the publisher (rank 0) pushes it the current weights and answers with the version
sent. Messages are served one at a time, so this never runs during a step: it waits for
the step and its publication to end, then sends the weights of that step.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.errors import DispatchError
from actors.model import build_model
from actors.model.publish import publish_to, publish_weights
from actors.trainer.batch import TrainSample
from actors.trainer.checkpoint import load_checkpoint, save_checkpoint
from actors.trainer.core import SamplingTransform
from actors.trainer.options import TrainerOptions
from actors.trainer.parallel import RankedGRPOTrainer
from actors.trainer.ranks import RankEnv, close_ranks, init_ranks
from actors.trainer.shard import ShardBuffer, imbalance
from actors.trainer.wire import train_sample
from transport.messages import (
    Ack,
    GroupAdvantages,
    LoadCheckpoint,
    Message,
    RepublishWeights,
    SampleDispatched,
    SaveCheckpoint,
    ShardEnd,
    ShardHeld,
    ShardLayout,
    TrainReport,
    TrainSamples,
    TrainStep,
    WeightsPublished,
)


class ShardReceiver:
    """A rank's receiving side of the data dispatcher (the trainer's, and any stand-in's):
    samples and advantages into its `ShardBuffer`, and the `ShardEnd` call that closes the
    shard, answered with `ShardHeld` once it is complete."""

    buffer: ShardBuffer

    def receiving_handlers(self) -> dict[type[Message], Handler]:
        return {
            SampleDispatched: self.handle_sample_dispatched,
            GroupAdvantages: self.handle_group_advantages,
            ShardEnd: self.handle_shard_end,
        }

    async def handle_sample_dispatched(self, msg: SampleDispatched) -> None:
        self.buffer.add_sample(msg.iteration, msg.sample)

    async def handle_group_advantages(self, msg: GroupAdvantages) -> None:
        self.buffer.add_advantages(msg)

    async def handle_shard_end(self, msg: ShardEnd) -> ShardHeld:
        """The end of this rank's shard: check it is complete and hold it (or fail the call)."""
        try:
            num_tokens = self.buffer.hold(msg)
        except DispatchError:
            self.buffer = ShardBuffer()
            raise
        return ShardHeld(
            iteration=msg.iteration,
            rank=msg.rank,
            num_samples=len(msg.request_ids),
            num_tokens=num_tokens,
            held_at=time.monotonic(),
        )


class TrainerActor(ShardReceiver, Actor):
    role = "trainer"
    Options = TrainerOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: TrainerOptions = ctx.options or TrainerOptions()
        self.trainer: RankedGRPOTrainer | None = None
        self.rank_env = self._rank_env()
        self.buffer = ShardBuffer()
        self.sent: tuple[int, list[TrainSample]] = (-1, [])  # (iteration, its early samples)

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            TrainStep: self.handle_train_step,
            TrainSamples: self.handle_train_samples,
            **self.receiving_handlers(),
            ShardLayout: self.handle_shard_layout,
            SaveCheckpoint: self.handle_save_checkpoint,
            LoadCheckpoint: self.handle_load_checkpoint,
            RepublishWeights: self.handle_republish_weights,
        }

    def _rank_env(self) -> RankEnv:
        if "WORLD_SIZE" in os.environ:  # under torchrun
            return RankEnv.from_env()
        return RankEnv(
            rank=self.ctx.index,
            world_size=max(1, self.num_peers("trainer")),
            local_rank=self.ctx.index,
            master_addr=self.opts.dist_addr or rank0_host(self.ctx.address_of("trainer", 0)),
            master_port=self.opts.dist_port,
        )

    @property
    def is_publisher(self) -> bool:
        return self.rank_env.rank == 0

    async def on_start(self) -> None:
        env, o = self.rank_env, self.opts
        await anyio.to_thread.run_sync(
            lambda: init_ranks(
                env, timeout_s=o.dist_timeout_s, collective_timeout_s=o.collective_timeout_s
            )
        )
        self.log.info("rank_joined", rank=env.rank, world_size=env.world_size)
        self.trainer = await anyio.to_thread.run_sync(self._build)

    async def on_stop(self) -> None:
        close_ranks()

    def _build(self) -> RankedGRPOTrainer:
        torch.set_num_threads(self.opts.num_threads)
        o = self.opts
        model = build_model(o.model)
        # the KL reference: the starting weights, frozen, on the same device (never saved:
        # a resumed run builds the same starting model from `model`, then loads the
        # checkpoint into the policy alone)
        ref_model = copy.deepcopy(model).eval() if o.kl_coef > 0 else None
        return RankedGRPOTrainer(
            model,
            ref_model=ref_model,
            restore_on_failure=o.restore_on_failure,
            lr=o.lr,
            max_grad_norm=o.max_grad_norm,
            clip_eps=o.clip_eps,
            kl_coef=o.kl_coef,
            micro_batch_size=o.micro_batch_size,
            mini_batch_size=o.mini_batch_size,
            epochs=o.epochs,
            pad_id=o.pad_id,
            seed=o.seed,
        )

    def _core(self) -> RankedGRPOTrainer:
        if self.trainer is None:
            raise RuntimeError("trainer not started")
        return self.trainer

    async def handle_train_samples(self, msg: TrainSamples) -> Ack:
        """Part of an iteration's samples, held for its `TrainStep` (a new iteration drops
        what an earlier one left)."""
        if self.rank_env.world_size > 1:
            raise DispatchError("a multi-rank trainer takes its samples from the dispatcher")
        if self.sent[0] != msg.iteration:
            self.sent = (msg.iteration, [])
        self.sent[1].extend(train_sample(s) for s in msg.samples)
        return Ack()

    async def handle_train_step(self, msg: TrainStep) -> TrainReport:
        trainer = self._core()
        if self.rank_env.world_size > 1:
            raise DispatchError("a multi-rank trainer takes its samples from the dispatcher")
        iteration, early = self.sent
        self.sent = (-1, [])
        held = len(early) if iteration == msg.iteration else 0
        if held != msg.num_sent:
            raise DispatchError(
                f"iteration {msg.iteration}: TrainStep counts {msg.num_sent} samples sent "
                f"ahead in TrainSamples, the trainer holds {held}"
            )
        samples = [*early[:held], *(train_sample(s) for s in msg.samples)]
        sp = msg.sampling
        transform = SamplingTransform(sp.temperature, sp.top_k, sp.top_p)
        stats = await anyio.to_thread.run_sync(lambda: trainer.step(samples, sampling=transform))
        start = time.perf_counter()
        await self._publish(trainer)
        stats = {**stats, "publish_s": time.perf_counter() - start}
        self.log.info(
            "trained",
            iteration=msg.iteration,
            version=trainer.version,
            loss=round(stats.get("loss", 0.0), 4),
        )
        return TrainReport(iteration=msg.iteration, version=trainer.version, stats=stats)

    async def handle_shard_layout(self, msg: ShardLayout) -> TrainReport:
        """Train this rank's shard with the other ranks; rank 0 then publishes."""
        trainer = self._core()
        error: DispatchError | None = None
        try:
            shard = self.buffer.take(msg)
        except DispatchError as exc:
            error = exc
            self.buffer = ShardBuffer()
        is_ok = await anyio.to_thread.run_sync(lambda: trainer.agree(error is None))
        if error is not None:
            raise error
        if not is_ok:
            raise DispatchError(f"iteration {msg.iteration}: another rank's shard is incomplete")
        s = msg.sampling
        transform = SamplingTransform(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
        stats = await anyio.to_thread.run_sync(
            lambda: trainer.step_shard(
                shard.samples,
                transform=transform,
                advantages=shard.advantages,
                flat_share=shard.flat_share,
            )
        )
        start = time.perf_counter()
        if self.is_publisher:
            await self._publish(trainer)
        stats = stats | {
            "publish_s": time.perf_counter() - start,
            "num_dropped": float(msg.num_dropped),
            "token_imbalance": imbalance(msg.num_tokens),
            "num_ranks": float(len(msg.num_samples)),
        }
        self.log.info(
            "trained_shard", iteration=msg.iteration, rank=msg.rank, version=trainer.version
        )
        return TrainReport(iteration=msg.iteration, version=trainer.version, stats=stats)

    async def _publish(self, trainer: RankedGRPOTrainer) -> None:
        trainer.check_usable()  # weights changed under the old version are never sent
        await publish_weights(
            self.mailbox,
            trainer.state_dict(),
            trainer.version,
            num_generators=self.num_peers("generator"),
            bucket_bytes=self.opts.bucket_bytes,
            notify_scheduler=self.has_peer("scheduler"),
        )

    async def handle_republish_weights(self, msg: RepublishWeights) -> WeightsPublished:
        """The current weights to generator `msg.instance` alone (it missed them)."""
        trainer = self._core()
        if not self.is_publisher:
            raise ValueError(f"trainer rank {self.rank_env.rank} does not publish; ask rank 0")
        if not 0 <= msg.instance < self.num_peers("generator"):
            raise ValueError(f"no generator {msg.instance} in the topology")
        trainer.check_usable()
        await publish_to(
            self.mailbox,
            trainer.state_dict(),
            trainer.version,
            msg.instance,
            bucket_bytes=self.opts.bucket_bytes,
        )
        self.log.info("weights_republished", generator=msg.instance, version=trainer.version)
        return WeightsPublished(version=trainer.version)

    async def handle_save_checkpoint(self, msg: SaveCheckpoint) -> Ack:
        trainer = self._core()
        trainer.check_usable()
        await anyio.to_thread.run_sync(
            lambda: save_checkpoint(
                trainer, msg.path, iteration=msg.iteration, source=self.opts.model.path
            )
        )
        return Ack()

    async def handle_load_checkpoint(self, msg: LoadCheckpoint) -> TrainReport:
        trainer = self._core()
        info = await anyio.to_thread.run_sync(lambda: load_checkpoint(trainer, msg.path))
        trainer.broken = ""  # a checkpoint's weights and version agree again
        if self.is_publisher:
            await self._publish(trainer)
        return TrainReport(iteration=int(info["iteration"]), version=trainer.version, stats={})


def rank0_host(address: str) -> str:
    """The host of trainer rank 0's inbox (`tcp://host:port`), where the ranks meet when
    `dist_addr` is "" (a launcher that learns addresses at run time: Ray, a registry);
    127.0.0.1 for ipc or inproc addresses (one host)."""
    if not address.startswith("tcp://"):
        return "127.0.0.1"
    host = address.removeprefix("tcp://").rpartition(":")[0]
    return host.strip("[]") or "127.0.0.1"
