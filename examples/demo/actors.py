"""The demo's actors: the transport and runtime at work on a topology of one's own.

A driver sends batches of symmetric matrices to the `Dispatcher`, which cuts each batch into
shards and deals them to the `Worker`s, least-in-flight first; each worker computes the
eigenvalues of its shard with torch and sends them to the `Collector`, which reassembles
each batch in shard order and hands it to the driver. The driver checks every result
against its own computation. Real processes, real sockets, real work; nothing learns.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from actors.base import Actor, ActorContext, Handler
from examples.demo.messages import BatchDone, ShardDone, ShardResult, WorkBatch, WorkShard
from transport.messages import Message


@dataclass(frozen=True, kw_only=True)
class DispatcherOptions:
    worker_role: str = "worker"


class Dispatcher(Actor):
    """WorkBatch -> WorkShard per shard, to the worker with the fewest shards in flight."""

    role = "dispatcher"
    Options = DispatcherOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: DispatcherOptions = ctx.options or DispatcherOptions()
        self.in_flight = [0] * self.num_peers(self.opts.worker_role)
        self.num_shards_sent = 0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {WorkBatch: self.handle_work_batch, ShardDone: self.handle_shard_done}

    async def handle_work_batch(self, msg: WorkBatch) -> None:
        if msg.num_shards < 1 or msg.matrices.shape[0] < msg.num_shards:
            raise ValueError(
                f"batch {msg.batch_id}: cannot cut {msg.matrices.shape[0]} "
                f"matrices into {msg.num_shards} shards"
            )
        for shard, part in enumerate(torch.as_tensor(msg.matrices).chunk(msg.num_shards)):
            worker = min(range(len(self.in_flight)), key=self.in_flight.__getitem__)
            self.in_flight[worker] += 1
            self.num_shards_sent += 1
            work = WorkShard(
                batch_id=msg.batch_id, shard=shard, num_shards=msg.num_shards, matrices=part
            )
            await self.send_to(self.opts.worker_role, worker, work)

    async def handle_shard_done(self, msg: ShardDone) -> None:
        self.in_flight[msg.result.worker] -= 1

    def counters(self) -> dict[str, float]:
        return {"shards_sent": self.num_shards_sent}


class Worker(Actor):
    """WorkShard -> ShardDone (eigenvalues) to the collector, with a copy to the dispatcher."""

    role = "worker"

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.num_shards = 0
        self.busy_s = 0.0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {WorkShard: self.handle_work_shard}

    async def handle_work_shard(self, msg: WorkShard) -> None:
        start = time.perf_counter()
        values = torch.linalg.eigvalsh(torch.as_tensor(msg.matrices))  # (n, D)
        elapsed = time.perf_counter() - start
        self.num_shards += 1
        self.busy_s += elapsed
        result = ShardResult(
            shard=msg.shard, worker=self.ctx.index, values=values, compute_s=elapsed
        )
        done = ShardDone(batch_id=msg.batch_id, num_shards=msg.num_shards, result=result)
        await self.send_to("collector", 0, done)
        await self.send_to("dispatcher", 0, done)

    def counters(self) -> dict[str, float]:
        return {"shards": self.num_shards, "busy_s": self.busy_s}


class Collector(Actor):
    """ShardDone -> BatchDone to the driver once every shard of a batch has arrived."""

    role = "collector"

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.partial: dict[int, dict[int, ShardResult]] = {}

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {ShardDone: self.handle_shard_done}

    async def handle_shard_done(self, msg: ShardDone) -> None:
        shards = self.partial.setdefault(msg.batch_id, {})
        if msg.result.shard in shards:
            self.log.warning("duplicate_shard", batch=msg.batch_id, shard=msg.result.shard)
            return
        shards[msg.result.shard] = msg.result
        if len(shards) == msg.num_shards:
            del self.partial[msg.batch_id]
            results = tuple(shards[i] for i in range(msg.num_shards))
            await self.send_to("driver", 0, BatchDone(batch_id=msg.batch_id, results=results))

    def counters(self) -> dict[str, Any]:
        return {"open_batches": len(self.partial)}
