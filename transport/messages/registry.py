"""The wire tags: `REGISTRY` maps each tag to its message type explicitly. It is checked at
import (unique tags, every message of this package registered, every field of a supported
type); tags never change, for wire compatibility. Messages defined elsewhere (examples, a
user's own actors) register with `register_extension`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from transport.messages.base import M, Message, Struct
from transport.messages.control import (
    Ack,
    ActorReady,
    ActorStats,
    ActorStopped,
    ErrorReply,
    GetStats,
    Heartbeat,
    PeerLost,
    PeersChanged,
    Ping,
    Pong,
    Stop,
    TensorBlob,
)
from transport.messages.drafts import DraftDeltas, GroupsClosed, SyncDrafts, TokensAppended
from transport.messages.environment import (
    EnvironmentClose,
    EnvironmentReset,
    EnvironmentResult,
    EnvironmentStep,
)
from transport.messages.generation import (
    ChunkAssigned,
    ChunkFinished,
    EndRollout,
    GetLoad,
    LoadReport,
)
from transport.messages.rollout import (
    CancelRollout,
    EstimateUpdated,
    GroupsOpened,
    PromptBatch,
    RequestFinished,
    RequestsAdded,
    RolloutFailed,
    RolloutFinished,
    RolloutPart,
    StreamToRanks,
)
from transport.messages.training import (
    GetLiveGenerators,
    GroupAdvantages,
    LiveGenerators,
    LoadCheckpoint,
    RepublishWeights,
    SampleDispatched,
    SamplesBatch,
    SaveCheckpoint,
    ShardEnd,
    ShardHeld,
    ShardLayout,
    TrainReport,
    TrainSamples,
    TrainStep,
    WeightsBucket,
    WeightsPublished,
)

REGISTRY: Final[dict[int, type[Message]]] = {
    1: Stop,
    2: ActorReady,
    3: Heartbeat,
    4: ActorStopped,
    5: Ack,
    6: ErrorReply,
    7: GetStats,
    8: ActorStats,
    9: PeerLost,
    10: Ping,
    11: Pong,
    12: TensorBlob,
    30: PromptBatch,
    31: GroupsOpened,
    32: RequestsAdded,
    33: ChunkAssigned,
    34: ChunkFinished,
    35: RequestFinished,
    36: EstimateUpdated,
    37: RolloutFinished,
    38: RolloutFailed,
    39: EndRollout,
    40: GetLoad,
    41: LoadReport,
    42: WeightsBucket,
    43: WeightsPublished,
    44: GetLiveGenerators,
    45: LiveGenerators,
    46: RepublishWeights,
    47: RolloutPart,
    48: TrainSamples,
    50: TrainStep,
    51: TrainReport,
    52: SaveCheckpoint,
    53: LoadCheckpoint,
    54: SampleDispatched,
    55: GroupAdvantages,
    56: ShardLayout,
    57: SamplesBatch,
    58: StreamToRanks,
    59: ShardEnd,
    64: ShardHeld,
    65: PeersChanged,
    60: TokensAppended,
    61: SyncDrafts,
    62: DraftDeltas,
    63: GroupsClosed,
    90: CancelRollout,
    91: EnvironmentReset,
    92: EnvironmentStep,
    93: EnvironmentClose,
    94: EnvironmentResult,
}


EXTENSION_TAGS: Final = range(1024, 2**16)
"""Tags for messages defined outside this package (examples, a user's own actors)."""


def register_extension(tag: int) -> Callable[[type[M]], type[M]]:
    """Class decorator: register a message defined outside this package under `tag` (in
    `EXTENSION_TAGS`), so the codec carries it. The message must follow the same rules."""

    def register(cls: type[M]) -> type[M]:
        if tag not in EXTENSION_TAGS:
            raise TypeError(f"extension tag {tag} of {cls.__name__} must be in 1024..65535")
        known = REGISTRY.get(tag)
        if known is not None and _qualified(known) != _qualified(cls):
            raise TypeError(f"tag {tag} is taken by {_qualified(known)}")
        _check_record(cls)
        REGISTRY[tag] = cls
        cls.TAG = tag
        return cls

    return register


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_record(cls: type) -> None:
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} must be a frozen, slotted dataclass")
    fields = cls.__dataclass_fields__.values()  # type: ignore[attr-defined]
    if not all(f.kw_only for f in fields):
        raise TypeError(f"{cls.__name__} must be kw_only")


def _is_ours(cls: type) -> bool:
    """`cls` is the class a module of this package binds under its name."""
    module = sys.modules.get(cls.__module__)
    ours = cls.__module__.startswith(__package__ + ".")
    return ours and module is not None and vars(module).get(cls.__name__) is cls


def _check_registry() -> None:
    """Fail at import if the registry and the message classes disagree."""
    tags: dict[type[Message], int] = {}
    for tag, cls in REGISTRY.items():
        if cls in tags:
            raise TypeError(f"{cls.__name__} registered twice (tags {tags[cls]} and {tag})")
        if not isinstance(tag, int) or not 0 < tag < EXTENSION_TAGS.start:
            raise TypeError(f"tag {tag!r} of {cls.__name__} must be an int in 1..1023")
        tags[cls] = tag
        cls.TAG = tag
    # slots=True makes a new class; the module's name binds the one that is used.
    declared = {c for c in Message.__subclasses__() if _is_ours(c)}
    missing = declared - set(tags)
    if missing:
        names = ", ".join(sorted(c.__name__ for c in missing))
        raise TypeError(f"messages without a tag in REGISTRY: {names}")
    structs: list[type] = [c for c in Struct.__subclasses__() if _is_ours(c)]
    for record in (*REGISTRY.values(), *structs):
        _check_record(record)


_check_registry()
