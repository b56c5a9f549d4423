"""TrainerActor: GRPO updates on scored samples, then versioned weights to the generators.

Consumes `TrainStep` (driver: the samples of one iteration with their rewards and the
weight version they must carry), `SaveCheckpoint`, `LoadCheckpoint`. A `TrainStep` runs one
`GRPOTrainer.step` in a worker thread (an off-policy sample refuses the whole step before
anything changes; the caller gets the error), publishes the new weights to every
generator in bounded tensor buckets and the version to the scheduler, and answers with a
`TrainReport`. Weights are loaded at start from `model_path` (the warm start) or made
randomly from `model_seed`, exactly as the generators make theirs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import torch

from actors.base import Actor, ActorContext, Handler
from actors.generator.actor import GeneratorOptions
from actors.model import LlamaModel, load_model
from actors.publish import publish_weights
from actors.trainer.batch import TrainSample
from actors.trainer.checkpoint import load_checkpoint, save_checkpoint
from actors.trainer.core import GRPOTrainer
from transport.messages import Ack, LoadCheckpoint, Message, SaveCheckpoint, TrainReport, TrainStep


@dataclass(frozen=True, kw_only=True)
class TrainerOptions:
    model: GeneratorOptions | None = None  # the same model options the generators use
    lr: float = 1e-4
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    max_grad_norm: float = 1.0
    micro_batch_size: int = 16
    mini_batch_size: int | None = None  # None: one optimiser step per epoch
    epochs: int = 1
    pad_id: int = 0
    num_generators: int = 2
    bucket_bytes: int = 16 << 20
    num_threads: int = 2
    seed: int = 0


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
        gen = self.opts.model or GeneratorOptions()
        if gen.model_path:
            model = load_model(gen.model_path)
        else:
            model = LlamaModel.random(gen.model_config(), seed=gen.model_seed)
        o = self.opts
        return GRPOTrainer(
            model,
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
        samples = [
            TrainSample(
                prompt_ids=s.prompt_ids,
                completion_ids=s.completion_ids,
                old_logprobs=s.old_logprobs,
                reward=s.reward,
                group_id=s.group_id,
                weight_version=s.weight_version,
            )
            for s in msg.samples
        ]
        stats = await anyio.to_thread.run_sync(
            lambda: trainer.step(samples, expected_version=msg.expected_version)
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
            num_generators=self.opts.num_generators,
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
