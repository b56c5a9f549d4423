"""Control plane and diagnostics: launcher <-> every actor (readiness, liveness, stop,
stats, replies to calls, topology changes), plus the ping and tensor messages the transport
benchmark and tests use."""

from __future__ import annotations

from dataclasses import dataclass, field

from transport.messages.base import Array, Message


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
class PeerLost(Message):
    """A launcher saw actor `role`/`index` die (Ray's liveness: its run ended); sent to the
    scheduler, which re-queues a lost generator's chunks as when it stops answering."""

    role: str
    index: int
    reason: str = ""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class PeersChanged(Message):
    """Driver -> every actor that stayed up, a call: the topology now has `count` actors of
    `role` (restarted in a new layout at the same addresses); sockets to the old ones go."""

    role: str
    count: int


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
