"""The demo's wire messages, registered with the codec under extension tags."""

from __future__ import annotations

from dataclasses import dataclass

from transport.messages import Array, Message, Struct, register_extension


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardResult(Struct):
    shard: int
    worker: int
    values: Array
    compute_s: float


@register_extension(1100)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkBatch(Message):
    """Driver -> dispatcher: a batch of symmetric matrices, (N, D, D) float32."""

    batch_id: int
    matrices: Array
    num_shards: int


@register_extension(1101)
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkShard(Message):
    """Dispatcher -> worker: one shard of a batch."""

    batch_id: int
    shard: int
    num_shards: int
    matrices: Array


@register_extension(1102)
@dataclass(frozen=True, slots=True, kw_only=True)
class ShardDone(Message):
    """Worker -> collector: eigenvalue spectra of one shard, (n, D) float32."""

    batch_id: int
    num_shards: int
    result: ShardResult


@register_extension(1103)
@dataclass(frozen=True, slots=True, kw_only=True)
class BatchDone(Message):
    """Collector -> driver: every shard of a batch, in shard order."""

    batch_id: int
    results: tuple[ShardResult, ...]
