"""Every message that crosses a socket, in one module.

Each message is a frozen, slotted, kw-only dataclass whose fields are msgpack-native
(int, float, str, bytes, bool, None, tuples, str-keyed dicts, nested `Struct` records) or
tensors (numpy arrays, torch tensors), which travel as raw frames. Fields hold ids, never
object references. `REGISTRY` maps each wire tag to its type explicitly; it is checked at
import (unique tags, every message registered, every field of a supported type), and every
envelope carries `PROTOCOL_VERSION`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeAlias, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

PROTOCOL_VERSION: Final = 1

PROMPT_TAIL_TOKENS: Final = 16
"""How many of a prompt's last tokens `GroupInfo.prompt_tail` carries: the draft store and
every generator's replicas put them before each sibling's response, so they must agree."""


class _TorchTensorType(type):
    def __instancecheck__(cls, obj: object) -> bool:
        torch = sys.modules.get("torch")  # no tensor exists before torch is imported
        return torch is not None and isinstance(obj, torch.Tensor)


class TorchTensor(metaclass=_TorchTensorType):
    """Stands for `torch.Tensor` in `Array` at run time, so that importing the transport
    does not import torch (seconds per process; the actors that need no tensors never do).
    `isinstance(x, TorchTensor)` is true for torch tensors; never instantiated."""


if TYPE_CHECKING:
    Array: TypeAlias = np.ndarray[Any, Any] | torch.Tensor
else:
    Array = np.ndarray[Any, Any] | TorchTensor
"""A numpy array or CPU torch tensor; travels as a msgpack header plus one raw frame.
(For type checkers `torch.Tensor`; at run time the `TorchTensor` marker, see above.)"""


class Message:
    """Base of every wire message; subclasses are registered in `REGISTRY`."""

    __slots__ = ()
    TAG: ClassVar[int]


M = TypeVar("M", bound=Message)


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


# --- rollout: driver -> splitter -> scheduler <-> generators; estimator ----------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingSpec(Struct):
    """Sampling for every sample of a rollout; `max_new_tokens` is the generation limit."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptSpec(Struct):
    """One prompt of a batch. `forced_lens` (benchmarks only): per-sample output lengths
    the engine stops at with ignore_eos; no scheduling policy but the oracle sees them."""

    prompt_id: str
    token_ids: tuple[int, ...]
    forced_lens: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSpec(Struct):
    """One sample of one group: exactly one engine request."""

    request_id: str
    group_id: str
    prompt_id: str
    index: int
    is_probe: bool
    prompt_ids: tuple[int, ...]
    sampling: SamplingSpec
    forced_len: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo(Struct):
    """`prompt_tail`: the prompt's last tokens, which the draft store puts before every
    sibling's response so drafts can start at the first response token."""

    group_id: str
    prompt_id: str
    size: int
    prompt_tail: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadInfo(Struct):
    """A generator's load and cumulative engine counters (names as in the engine's)."""

    instance: int
    num_running: int
    num_waiting: int
    num_parked: int
    kv_tokens_used: int
    kv_tokens_total: int
    max_running: int
    weight_version: int
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0
    num_reprefilled_tokens: int = 0
    num_generated_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecStats(Struct):
    """Speculation over one chunk: verify steps, the tokens they emitted, draft nodes
    offered and accepted. Mean acceptance length (bonus token included) =
    num_tokens / num_steps."""

    num_steps: int = 0
    num_tokens: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleResult(Struct):
    """One finished sample. `weight_versions`: the version of every chunk, in order; a
    sample whose chunks disagree mixes policies and is refused for training."""

    request_id: str
    group_id: str
    prompt_id: str
    index: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    weight_versions: tuple[int, ...]
    start_s: float
    end_s: float

    @property
    def num_chunks(self) -> int:
        return len(self.weight_versions)


# --- rollout records: what the scheduler saw (times are seconds since the rollout began) --

FINISH_REASONS: Final = ("chunk", "stop", "length", "abort", "error")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkRecord(Struct):
    """One dispatch of one request to one generator instance: `dispatched_s` when the
    scheduler sent it, `start_s` when the engine step that made its first token began,
    `end_s` when it finished. `generated_before`: the request's committed output length
    at dispatch; `num_reprefilled_tokens`: what the engine prefilled again because the KV
    was not there (a moved or evicted request). `finish_reason` is one of
    `FINISH_REASONS` ("chunk": the chunk budget was used up, the request goes back)."""

    request_id: str
    group_id: str
    instance: int
    chunk_seq: int
    dispatched_s: float
    start_s: float
    end_s: float
    num_new_tokens: int
    prompt_len: int
    generated_before: int
    num_reprefilled_tokens: int
    finish_reason: str
    weight_version: int = 0
    spec: SpecStats = SpecStats()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord(Struct):
    """One sample of a group, from its arrival at the scheduler to its final result."""

    request_id: str
    group_id: str
    prompt_id: str
    is_probe: bool
    prompt_len: int
    output_len: int
    arrival_s: float
    finish_s: float
    finish_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceCounters(Struct):
    """Engine-side totals of one generator instance over the rollout."""

    instance: int
    num_preemptions: int
    num_recomputed_tokens: int
    num_reprefilled_tokens: int
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutRecord(Struct):
    """Everything the scheduler recorded about one rollout; it travels typed in
    `RolloutFinished`, and `pipeline.records.trace` saves and checks it as a file.
    ``requests``: the finished ones, in the order they arrived (requests arriving together
    share an ``arrival_s``; the order is what the scheduler's policies saw)."""

    policy: str
    num_instances: int
    chunks: tuple[ChunkRecord, ...]
    requests: tuple[RequestRecord, ...]
    instances: tuple[InstanceCounters, ...]
    makespan_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptBatch(Message):
    """Driver -> splitter: roll out `group_size` samples of every prompt."""

    rollout_id: str
    prompts: tuple[PromptSpec, ...]
    group_size: int
    sampling: SamplingSpec
    policy: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupsOpened(Message):
    """Splitter -> estimator: the groups of a new rollout."""

    rollout_id: str
    groups: tuple[GroupInfo, ...]
    generation_limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestsAdded(Message):
    """Splitter -> scheduler: every request of a rollout (one per sample)."""

    rollout_id: str
    requests: tuple[RequestSpec, ...]
    policy: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkAssigned(Message):
    """Scheduler -> generator: generate at most `max_tokens` more tokens of a request."""

    rollout_id: str
    request_id: str
    chunk_seq: int
    prompt_ids: tuple[int, ...]
    generated_ids: tuple[int, ...]
    max_tokens: int
    total_limit: int
    sampling: SamplingSpec
    weight_version: int
    group_id: str = ""
    is_probe: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ChunkFinished(Message):
    """Generator -> scheduler: a chunk's tokens, why it ended, and the generator's load."""

    rollout_id: str
    request_id: str
    chunk_seq: int
    instance: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    weight_version: int
    start_time: float
    end_time: float
    num_cached_tokens: int
    load: LoadInfo
    error: str = ""
    spec: SpecStats = SpecStats()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFinished(Message):
    """Scheduler -> estimator: a sample is complete."""

    rollout_id: str
    group_id: str
    request_id: str
    output_len: int
    context_len: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateUpdated(Message):
    """Estimator -> scheduler: a group's length estimate changed."""

    rollout_id: str
    group_id: str
    estimate: int
    average_context_len: float


MetaValue: TypeAlias = (
    int | float | str | bool | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]
)
"""A value of a task prompt's verifier metadata, as it travels to where samples are scored."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptMeta(Struct):
    """What the verifier needs to score a prompt's samples (a task's `TaskPrompt.meta`)."""

    prompt_id: str
    meta: dict[str, MetaValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamToRanks(Message):
    """Driver -> scheduler, a call before the rollout starts: score each sample of rollout
    `rollout_id` where it finishes (task `task`'s verifier, with the prompts' metadata) and
    send it straight to one of `num_ranks` trainer ranks (Earl's direct dispatch)."""

    rollout_id: str
    iteration: int
    num_ranks: int
    group_size: int
    expected_version: int
    task: str
    prompts: tuple[PromptMeta, ...]
    step_credit: bool = False  # locate each failed sample's first wrong token (the scorer's)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSummary(Struct):
    """What the driver keeps of a streamed rollout: every sample's reward and output length
    (by request id), and the layout the ranks train on (request ids per rank, in the order
    sent; tokens per rank; samples that ended in error, never sent)."""

    rewards: dict[str, float]
    output_lens: dict[str, int]
    rank_request_ids: tuple[tuple[str, ...], ...]
    num_tokens: tuple[int, ...]
    num_dropped: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutFinished(Message):
    """Scheduler -> driver: every sample, and what the scheduler recorded. A streamed
    rollout's samples come without tokens and logprobs (they went to the trainer ranks);
    `stream` then says where."""

    rollout_id: str
    samples: tuple[SampleResult, ...]
    record: RolloutRecord
    stream: StreamSummary | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutFailed(Message):
    rollout_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EndRollout(Message):
    """Scheduler -> generator: drop the parked KV of these requests."""

    rollout_id: str
    request_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GetLoad(Message):
    """Ask a generator for its `LoadReport`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadReport(Message):
    load: LoadInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightsBucket(Message):
    """Trainer/driver -> generator: part of a versioned state dict; `is_last` commits it."""

    version: int
    bucket: int
    tensors: dict[str, Array]
    is_last: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightsPublished(Message):
    """Publisher -> scheduler: the weight version every new chunk must be generated with;
    `missed`: generators that did not take it (unreachable): they get no work until the
    current weights reach them. Also the trainer's answer to `RepublishWeights`."""

    version: int
    missed: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetLiveGenerators(Message):
    """Publisher -> scheduler (call): which generators to publish weights to. The scheduler
    probes the ones it declared lost (a generator that answers again is included)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveGenerators(Message):
    """Scheduler -> publisher: the generators that answer (possibly none)."""

    instances: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RepublishWeights(Message):
    """Scheduler -> trainer (call): generator `instance` answers again but holds an older
    weight version than the current one; push it the current weights (answered with
    `WeightsPublished` naming the version sent, once the generator has swapped)."""

    instance: int


# --- drafts: generators <-> draft-tree store (Seer's DGDS) ----------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenAppend(Struct):
    """Tokens `start .. start + len(token_ids)` of one request's response, written by the
    generator running chunk `chunk_seq` of it."""

    group_id: str
    request_id: str
    chunk_seq: int
    start: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TokensAppended(Message):
    """Generator -> draft store (one-way, batched)."""

    appends: tuple[TokenAppend, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCursor(Struct):
    """How much of a group's append log a replica has replayed."""

    group_id: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqLength(Struct):
    """How many response tokens of sequence `seq` of a group someone holds."""

    group_id: str
    seq: str
    length: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncDrafts(Message):
    """Generator -> draft store (call): the groups it drafts for, and how far it has
    replayed each one's log (0 = nothing yet) in the store it last heard from
    (`store_id`; another store, e.g. a restarted one, serves its log from the start);
    `own`: the sequences this generator writes and how many tokens it has sent of each
    (the store answers with how many it holds, so lost appends are re-sent)."""

    groups: tuple[GroupCursor, ...]
    store_id: str = ""
    own: tuple[SeqLength, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqDelta(Struct):
    """One entry of a group's append log: tokens `start ..` of a sequence at `epoch`;
    `start == 0` with a new epoch means: drop what you have of the sequence, replay."""

    group_id: str
    seq: str
    epoch: int
    start: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftDeltas(Message):
    """Draft store -> generator: the log entries each replica lacks, the versions they
    bring it to, and the groups that are gone."""

    deltas: tuple[SeqDelta, ...]
    versions: tuple[GroupCursor, ...] = ()
    closed: tuple[str, ...] = ()
    store_id: str = ""
    lengths: tuple[SeqLength, ...] = ()  # the store's length of each of the caller's `own`
    # named groups whose `GroupsOpened` the store has not had yet (unknown, or known only
    # from appends): their history, if any, comes with it
    unopened: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupsClosed(Message):
    """Scheduler -> draft store: every sample of these groups finished."""

    rollout_id: str
    group_ids: tuple[str, ...]


# --- training: driver -> trainer -> generators ---------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSampleSpec(Struct):
    """One scored sample: what the trainer needs for GRPO."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]
    reward: float
    group_id: str
    weight_versions: tuple[int, ...]  # one per chunk; all must be the expected version
    # the completion token the task's verifier located as the first mistake (-1: none, or a
    # right answer): the sample then trains on that token alone (step credit, trainer/batch.py)
    error_index: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainStep(Message):
    """Driver -> trainer: one policy update on these samples, then publish the weights."""

    iteration: int
    samples: tuple[TrainSampleSpec, ...]
    expected_version: int
    # the distribution the samples were drawn from: new logprobs use the same transform
    sampling: SamplingSpec = SamplingSpec()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainReport(Message):
    """Trainer -> driver: the update's statistics and the version now on every generator."""

    iteration: int
    version: int
    stats: dict[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveCheckpoint(Message):
    path: str
    iteration: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadCheckpoint(Message):
    """Restore the trainer from `path` and publish its weights; replied with TrainReport."""

    path: str


# --- Earl's data dispatcher: samples stream from where they finish to the trainer rank ----


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleData(Struct):
    """One finished sample as a trainer rank consumes it. `token_ids` (L,) int32 is prompt +
    completion; `old_logprobs` (L,) float32 and `loss_mask` (L,) uint8 are aligned with it
    (mask 1 on completion tokens, logprob 0 elsewhere)."""

    request_id: str
    group_id: str
    prompt_len: int
    token_ids: Array
    old_logprobs: Array
    loss_mask: Array
    reward: float
    weight_versions: tuple[int, ...]
    error_index: int = -1  # step credit: the completion's first wrong token (-1: none)


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleDispatched(Message):
    """Dispatcher -> trainer rank: one sample, sent the moment it finished."""

    iteration: int
    sample: SampleData


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAdvantages(Message):
    """Dispatcher -> each rank holding part of a group, once the group is complete: the
    advantage of every member (`advantages` (G,) aligned with `request_ids`) and whether the
    group is flat (all rewards equal: no gradient without a KL term)."""

    iteration: int
    group_id: str
    request_ids: tuple[str, ...]
    advantages: tuple[float, ...]
    is_flat: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardLayout(Message):
    """Dispatcher/driver -> every rank, a call: the iteration's layout (which requests each
    rank holds), the sampling transform of the logprobs, then train; replied with TrainReport.
    `request_ids` are this rank's; `num_samples`/`num_tokens` are per rank; `num_dropped`
    counts samples that ended in error (dropped everywhere, never sent)."""

    iteration: int
    rank: int
    expected_version: int
    request_ids: tuple[str, ...]
    num_samples: tuple[int, ...]
    num_tokens: tuple[int, ...]
    num_dropped: int
    sampling: SamplingSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class PeersChanged(Message):
    """Driver -> every actor that stayed up, a call: the topology now has `count` actors of
    `role` (restarted in a new layout at the same addresses); sockets to the old ones go."""

    role: str
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardEnd(Message):
    """Dispatcher -> each rank, a call, once the rollout's last sample has finished: the end
    of this rank's shard (its requests, in the order sent) with the advantages not sent yet
    (the last groups': `adv_request_ids`, `advantages`, `flat_share` aligned) and the
    samples not sent yet (`samples`: the rollout's last sample rides in its rank's end
    rather than in a message of its own). The rank adds them, checks it holds exactly that
    shard and answers `ShardHeld`; a shard that does not match fails the call. One message
    per rank, sent to all ranks at once."""

    iteration: int
    rank: int
    request_ids: tuple[str, ...]
    adv_request_ids: tuple[str, ...]
    advantages: tuple[float, ...]
    flat_share: tuple[float, ...]
    samples: tuple[SampleData, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardHeld(Message):
    """Rank -> dispatcher, the reply to `ShardEnd`: the rank holds its whole shard (checked
    against the end's request ids) since `held_at` (its `time.monotonic()`)."""

    iteration: int
    rank: int
    num_samples: int
    num_tokens: int
    held_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplesBatch(Message):
    """The centralized path: the driver's gathered batch to rank 0, or rank 0's scatter to a
    rank, with the advantages of every group (computed by whoever held the whole batch)."""

    iteration: int
    samples: tuple[SampleData, ...]
    advantages: tuple[float, ...]
    is_flat: tuple[bool, ...]


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
}


EXTENSION_TAGS: Final = range(1024, 2**16)
"""Tags for messages defined outside this module (examples, a user's own actors)."""


def register_extension(tag: int) -> Callable[[type[M]], type[M]]:
    """Class decorator: register a message defined outside this module under `tag` (in
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
    declared = {c for c in Message.__subclasses__() if globals().get(c.__name__) is c}
    missing = declared - set(tags)
    if missing:
        names = ", ".join(sorted(c.__name__ for c in missing))
        raise TypeError(f"messages without a tag in REGISTRY: {names}")
    structs = [c for c in Struct.__subclasses__() if globals().get(c.__name__) is c]
    for cls in (*REGISTRY.values(), *structs):
        _check_record(cls)


_check_registry()
