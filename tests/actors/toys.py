"""Small actors for runtime tests (importable by child processes)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from actors.base import Actor, ActorContext, Handler
from actors.generator.actor import GeneratorActor
from actors.generator.engine import ChunkResult
from actors.trainer.actor import ShardReceiver
from actors.trainer.shard import ShardBuffer
from transport.messages import (
    ChunkAssigned,
    ChunkFinished,
    Message,
    ShardLayout,
    TensorBlob,
    TrainReport,
)


class Doubler(Actor):
    """Replies to TensorBlob with the tensor doubled; a blob named 'boom' makes it raise."""

    role = "doubler"

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.started = 0
        self.stopped = 0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {TensorBlob: self.handle_tensor_blob}

    async def on_start(self) -> None:
        self.started += 1

    async def on_stop(self) -> None:
        self.stopped += 1

    async def handle_tensor_blob(self, msg: TensorBlob) -> TensorBlob:
        if msg.name == "boom":
            raise ValueError("asked to fail")
        return TensorBlob(name=msg.name, tensor=torch.as_tensor(msg.tensor) * 2)

    def counters(self) -> dict[str, float]:
        return {"started": self.started}


class BrokenStart(Actor):
    role = "broken"

    async def on_start(self) -> None:
        raise RuntimeError("cannot load the model file /nowhere")


class DuplicatingGenerator(GeneratorActor):
    """Sends every chunk result twice, and a result for a request nobody asked for."""

    async def _report(self, msg: ChunkAssigned, chunk: ChunkResult) -> None:
        await super()._report(msg, chunk)
        await super()._report(msg, chunk)  # the same result again: a duplicate
        bogus = ChunkFinished(
            rollout_id=msg.rollout_id,
            request_id="nobody;",
            chunk_seq=1,
            instance=self.ctx.index,
            token_ids=(1, 2),
            logprobs=(0.0, 0.0),
            finish_reason="stop",
            weight_version=0,
            start_time=0.0,
            end_time=0.0,
            num_cached_tokens=0,
            load=self.load_info(),
        )
        await self.send_to("scheduler", 0, bogus)


class ShardRank(ShardReceiver, Actor):
    """A trainer rank without torch.distributed: collects what the dispatcher streams with
    the trainer's own receiving side (`ShardReceiver`: `ShardBuffer`, the `ShardEnd` call)
    and answers a `ShardLayout` with what it holds (`ShardBuffer.take` raises on anything
    missing, extra or without advantages)."""

    role = "trainer"

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.buffer = ShardBuffer()

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {**self.receiving_handlers(), ShardLayout: self.handle_shard_layout}

    async def handle_shard_layout(self, msg: ShardLayout) -> TrainReport:
        shard = self.buffer.take(msg)
        tokens = sum(len(s.completion_ids) for s in shard.samples)
        stats = {"num_local_samples": float(len(shard.samples)), "num_tokens": float(tokens)}
        return TrainReport(iteration=msg.iteration, version=0, stats=stats)
