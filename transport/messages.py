"""Every message that crosses a socket, in one module.

Each message is a frozen, slotted, kw-only dataclass whose fields are msgpack-native
(int, float, str, bytes, bool, None, tuples, str-keyed dicts, nested `Struct` records) or
tensors (numpy arrays, torch tensors), which travel as raw frames. Fields hold ids, never
object references. `REGISTRY` maps each wire tag to its type explicitly; it is checked at
import (unique tags, every message registered, every field of a supported type), and every
envelope carries `PROTOCOL_VERSION`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeAlias

import numpy as np
import torch

PROTOCOL_VERSION: Final = 1

Array: TypeAlias = np.ndarray[Any, Any] | torch.Tensor
"""A numpy array or CPU torch tensor; travels as a msgpack header plus one raw frame."""


class Message:
    """Base of every wire message; subclasses are registered in `REGISTRY`."""

    __slots__ = ()
    TAG: ClassVar[int]


class Struct:
    """Base of records nested inside messages (encoded as maps, validated on decode)."""

    __slots__ = ()


# --- control plane: launcher <-> actors -------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop(Message):
    """Ask an actor to stop gracefully."""

    reason: str = "requested"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorReady(Message):
    """An actor has bound its sockets and serves; sent once to the launcher."""

    role: str
    index: int
    pid: int
    address: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    """Periodic liveness and health counters, actor -> launcher."""

    role: str
    index: int
    seq: int
    num_handled: int
    num_failed: int
    num_rejected: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorStopped(Message):
    """An actor has left its serve loop and closed its sockets."""

    role: str
    index: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ack(Message):
    """Empty positive reply to a call."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorReply(Message):
    """Reply to a call whose handler failed or whose request was refused."""

    kind: str
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GetStats(Message):
    """Ask an actor for its counters (replied with `ActorStats`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorStats(Message):
    role: str
    index: int
    num_handled: int
    num_failed: int
    num_rejected: int
    counters: dict[str, float] = field(default_factory=dict)


# --- diagnostics and benchmarks ---------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Ping(Message):
    seq: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pong(Message):
    seq: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorBlob(Message):
    """A named tensor; used by the transport benchmark and tests."""

    name: str
    tensor: Array


# --- the demo topology (`seer run` until the RL loop lands) ------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardResult(Struct):
    shard: int
    worker: int
    values: Array
    compute_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkBatch(Message):
    """Driver -> dispatcher: a batch of symmetric matrices, (N, D, D) float32."""

    batch_id: int
    matrices: Array
    num_shards: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkShard(Message):
    """Dispatcher -> worker: one shard of a batch."""

    batch_id: int
    shard: int
    num_shards: int
    matrices: Array


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardDone(Message):
    """Worker -> collector: eigenvalue spectra of one shard, (n, D) float32."""

    batch_id: int
    num_shards: int
    result: ShardResult


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchDone(Message):
    """Collector -> driver: every shard of a batch, in shard order."""

    batch_id: int
    results: tuple[ShardResult, ...]


REGISTRY: Final[dict[int, type[Message]]] = {
    1: Stop,
    2: ActorReady,
    3: Heartbeat,
    4: ActorStopped,
    5: Ack,
    6: ErrorReply,
    7: GetStats,
    8: ActorStats,
    10: Ping,
    11: Pong,
    12: TensorBlob,
    20: WorkBatch,
    21: WorkShard,
    22: ShardDone,
    23: BatchDone,
}


def _check_registry() -> None:
    """Fail at import if the registry and the message classes disagree."""
    tags: dict[type[Message], int] = {}
    for tag, cls in REGISTRY.items():
        if cls in tags:
            raise TypeError(f"{cls.__name__} registered twice (tags {tags[cls]} and {tag})")
        if not isinstance(tag, int) or not 0 < tag < 2**16:
            raise TypeError(f"tag {tag!r} of {cls.__name__} must be an int in 1..65535")
        tags[cls] = tag
        cls.TAG = tag
    # slots=True makes a new class; the module's name binds the one that is used.
    declared = {c for c in Message.__subclasses__() if globals().get(c.__name__) is c}
    missing = declared - set(tags)
    if missing:
        names = ", ".join(sorted(c.__name__ for c in missing))
        raise TypeError(f"messages without a tag in REGISTRY: {names}")
    structs = [c for c in Struct.__subclasses__() if globals().get(c.__name__) is c]
    for cls in (*REGISTRY.values(), *structs):
        params = getattr(cls, "__dataclass_params__", None)
        if params is None or not params.frozen or "__slots__" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} must be a frozen, slotted dataclass")
        fields = cls.__dataclass_fields__.values()
        if not all(f.kw_only for f in fields):
            raise TypeError(f"{cls.__name__} must be kw_only")


_check_registry()
