"""TrainerActor: GRPO updates on scored samples, then versioned weights to the generators.

Consumes `TrainStep` (driver: the samples of one iteration with their rewards and the
weight version they must carry), `SaveCheckpoint`, `LoadCheckpoint`. A `TrainStep` runs one
`GRPOTrainer.step` in a worker thread (an off-policy sample refuses the whole step before
anything changes; the caller gets the error), publishes the new weights to every
generator in bounded tensor buckets and the version to the scheduler, and answers with a
`TrainReport`. The model is built from the `model` option by `build_model`, exactly as
the generators build theirs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.model import build_model
from actors.trainer.checkpoint import load_checkpoint, save_checkpoint
from actors.trainer.core import GRPOTrainer, SamplingTransform
from actors.trainer.options import TrainerOptions
from actors.trainer.publish import publish_weights
from actors.trainer.wire import train_sample
from transport.messages import Ack, LoadCheckpoint, Message, SaveCheckpoint, TrainReport, TrainStep


class TrainerActor(Actor):
    role = "trainer"
    Options = TrainerOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: TrainerOptions = ctx.options or TrainerOptions()
        self.trainer: GRPOTrainer | None = None

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            TrainStep: self.handle_train_step,
            SaveCheckpoint: self.handle_save_checkpoint,
            LoadCheckpoint: self.handle_load_checkpoint,
        }

    async def on_start(self) -> None:
        self.trainer = await anyio.to_thread.run_sync(self._build)

    def _build(self) -> GRPOTrainer:
        torch.set_num_threads(self.opts.num_threads)
        o = self.opts
        return GRPOTrainer(
            build_model(o.model),
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

    def _core(self) -> GRPOTrainer:
        if self.trainer is None:
            raise RuntimeError("trainer not started")
        return self.trainer

    async def handle_train_step(self, msg: TrainStep) -> TrainReport:
        trainer = self._core()
        samples = [train_sample(s) for s in msg.samples]
        sp = msg.sampling
        transform = SamplingTransform(sp.temperature, sp.top_k, sp.top_p)
        stats = await anyio.to_thread.run_sync(
            lambda: trainer.step(samples, expected_version=msg.expected_version, sampling=transform)
        )
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

    async def _publish(self, trainer: GRPOTrainer) -> None:
        await publish_weights(
            self.mailbox,
            trainer.state_dict(),
            trainer.version,
            num_generators=self.num_peers("generator"),
            bucket_bytes=self.opts.bucket_bytes,
        )

    async def handle_save_checkpoint(self, msg: SaveCheckpoint) -> Ack:
        trainer = self._core()
        await anyio.to_thread.run_sync(
            lambda: save_checkpoint(trainer, msg.path, iteration=msg.iteration)
        )
        return Ack()

    async def handle_load_checkpoint(self, msg: LoadCheckpoint) -> TrainReport:
        trainer = self._core()
        info = await anyio.to_thread.run_sync(lambda: load_checkpoint(trainer, msg.path))
        await self._publish(trainer)
        return TrainReport(iteration=int(info["iteration"]), version=trainer.version, stats={})
