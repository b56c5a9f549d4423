"""The training link: driver -> trainer (steps, checkpoints), trainer -> generators and
scheduler (versioned weights), and Earl's data dispatcher -> trainer ranks (samples as they
finish, advantages, shard layouts and ends)."""

from __future__ import annotations

from dataclasses import dataclass

from transport.messages.base import Array, LogProbs, Message, Struct, TokenIds
from transport.messages.rollout import SamplingSpec


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
    """Scheduler -> publisher: the generators that answer (possibly none), and the weight
    version new chunks carry now (the last published; a new one must be higher)."""

    instances: tuple[int, ...]
    weight_version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RepublishWeights(Message):
    """Scheduler -> trainer (call): generator `instance` answers again but holds an older
    weight version than the current one; push it the current weights (answered with
    `WeightsPublished` naming the version sent, once the generator has swapped)."""

    instance: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSampleSpec(Struct):
    """One scored sample: what the trainer needs for GRPO."""

    prompt_ids: TokenIds
    completion_ids: TokenIds
    old_logprobs: LogProbs
    reward: float
    group_id: str
    weight_versions: tuple[int, ...]  # one per chunk; all must be the trainer's version
    # the completion token the task's verifier located as the first mistake (-1: none, or a
    # right answer): the sample then trains on that token alone (step credit, trainer/batch.py)
    error_index: int = -1
    # per completion token: 1 trains (the model sampled it), 0 never does (a multi-turn
    # episode's observation tokens); empty: every completion token trains
    loss_mask: TokenIds = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainSamples(Message):
    """Driver -> trainer (call, answered with `Ack`): part of iteration `iteration`'s
    samples, sent ahead of its `TrainStep` so that no one message carries a whole rollout
    (`pipeline.rl.steps.send_train_step` splits by size)."""

    iteration: int
    samples: tuple[TrainSampleSpec, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainStep(Message):
    """Driver -> trainer: one policy update on these samples, then publish the weights.
    `num_sent`: how many samples of this iteration came before in `TrainSamples` (they
    come first; the trainer refuses a step that does not match what it holds)."""

    iteration: int
    samples: tuple[TrainSampleSpec, ...]
    # the distribution the samples were drawn from: new logprobs use the same transform
    sampling: SamplingSpec = SamplingSpec()  # noqa: RUF009 (frozen: shared safely)
    num_sent: int = 0


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
    request_ids: tuple[str, ...]
    num_samples: tuple[int, ...]
    num_tokens: tuple[int, ...]
    num_dropped: int
    sampling: SamplingSpec


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
