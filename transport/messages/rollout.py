"""The rollout link: driver -> splitter -> scheduler, splitter/scheduler <-> estimator, and
the scheduler's answer to the driver (samples, records, the streamed layout)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

from transport.messages.base import LogProbs, Message, Struct, TokenIds
from transport.messages.records import ChunkRecord, RequestRecord, RolloutRecord

PROMPT_TAIL_TOKENS: Final = 16
"""How many of a prompt's last tokens `GroupInfo.prompt_tail` carries: the draft store and
every generator's replicas put them before each sibling's response, so they must agree."""


MetaValue: TypeAlias = (
    int | float | str | bool | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]
)
"""A value of a task prompt's verifier metadata, as it travels to where samples are scored."""


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
    token_ids: TokenIds
    forced_lens: tuple[int, ...] = ()
    # what the prompt's environment needs (a multi-turn episode's `reset` gets it)
    env_info: dict[str, MetaValue] = field(default_factory=dict)


EpisodeEnd = Literal[
    "done",
    "max_turns",
    "length",
    "error",
    "env_error",
    "env_timeout",
    "env_lost",
    "bad_observation",
]
"""Why an episode ended: its environment said done; `max_turns` steps without done; its token
budget (the sampling's `max_new_tokens`, actions and observations together) ran out; its
generation failed ("error"); its environment raised, timed out, was lost (the environment
actor stopped answering) or returned something that is not token ids or text. The last
four score the episode 0 (docs/multiturn.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeSpec(Struct):
    """A multi-turn episode: after each turn (the model's action, ended by a stop token or
    `max_turn_tokens`) the environment built by `environment` ("package.module:factory",
    imported by the environment actor) answers with an observation that is appended to the
    context with loss mask 0. `max_turns` environment steps at most; an observation longer
    than `max_observation_tokens` is cut on the side `observation_cut` names ("right" keeps
    its first tokens, "left" its last). The episode's whole token budget after the prompt
    (actions and observations) is the sampling's `max_new_tokens`."""

    environment: str
    max_turns: int = 4
    max_turn_tokens: int = 0  # action tokens per turn (0: only the episode budget bounds it)
    max_observation_tokens: int = 64
    observation_cut: Literal["left", "right"] = "right"


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeResult(Struct):
    """A multi-turn sample's trajectory records, one entry per token of its `token_ids`
    where per token: `loss_mask` 1 for a token the model sampled, 0 for an observation
    token; `token_versions` the weight version that sampled the token (-1: observation).
    Per turn: `turn_ends` (one past the turn's last action token), `stop_reasons` ("stop",
    "turn_length", "length", "error") and `step_rewards` (what each environment step gave;
    a turn the environment never answered has none). `reward`: the episode's reward (the
    sum of its step rewards; 0 when it ended in a failure of its environment);
    `num_cut_tokens`: observation tokens cut to the per-turn budget."""

    loss_mask: TokenIds
    token_versions: TokenIds
    turn_ends: tuple[int, ...]
    stop_reasons: tuple[str, ...]
    step_rewards: tuple[float, ...]
    reward: float
    end_reason: EpisodeEnd
    num_cut_tokens: int = 0

    @property
    def num_turns(self) -> int:
        return len(self.turn_ends)


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSpec(Struct):
    """One sample of one group: exactly one engine request."""

    request_id: str
    group_id: str
    prompt_id: str
    index: int
    is_probe: bool
    prompt_ids: TokenIds
    sampling: SamplingSpec
    forced_len: int = 0
    episode: EpisodeSpec | None = None  # a multi-turn episode (None: one completion)
    env_info: dict[str, MetaValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupInfo(Struct):
    """`prompt_tail`: the prompt's last tokens, which the draft store puts before every
    sibling's response so drafts can start at the first response token."""

    group_id: str
    prompt_id: str
    size: int
    prompt_tail: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleResult(Struct):
    """One finished sample. `weight_versions`: the version of every chunk, in order; a
    sample whose chunks disagree mixes policies and is refused for training. `error`: why
    a sample whose finish reason is "error" failed (the engine's message), else ""."""

    request_id: str
    group_id: str
    prompt_id: str
    index: int
    token_ids: TokenIds
    logprobs: LogProbs
    finish_reason: str
    weight_versions: tuple[int, ...]
    start_s: float
    end_s: float
    error: str = ""
    episode: EpisodeResult | None = None  # a multi-turn sample's trajectory records

    @property
    def num_chunks(self) -> int:
        return len(self.weight_versions)


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptBatch(Message):
    """Driver -> splitter: roll out `group_size` samples of every prompt."""

    rollout_id: str
    prompts: tuple[PromptSpec, ...]
    group_size: int
    sampling: SamplingSpec
    policy: str = ""
    episode: EpisodeSpec | None = None  # every sample is a multi-turn episode
    # episodes' turns back to the generator holding their KV (None: the scheduler's
    # `sticky_turns`); False: each turn placed as a fresh request
    sticky_turns: bool | None = None


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
    sticky_turns: bool | None = None  # as the PromptBatch's


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestFinished(Message):
    """Scheduler -> estimator: a sample is complete."""

    rollout_id: str
    group_id: str
    request_id: str
    output_len: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EstimateUpdated(Message):
    """Estimator -> scheduler: a group's length estimate changed."""

    rollout_id: str
    group_id: str
    estimate: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptMeta(Struct):
    """What the verifier needs to score a prompt's samples (a task's `TaskPrompt.meta`)."""

    prompt_id: str
    meta: dict[str, MetaValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamToRanks(Message):
    """Driver -> scheduler, a call before the rollout starts: score each sample of rollout
    `rollout_id` where it finishes (task `task`'s verifier, with the prompts' metadata) and
    send it straight to one of `num_ranks` trainer ranks (Earl's direct dispatch). `task` is
    the run's task spec (a registered name or "package.module:factory") and `model_dir` the
    run's model folder ("" = none), from which the scorer builds the same task."""

    rollout_id: str
    iteration: int
    num_ranks: int
    group_size: int
    task: str
    prompts: tuple[PromptMeta, ...]
    step_credit: bool = False  # locate each failed sample's first wrong token (the scorer's)
    model_dir: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSummary(Struct):
    """What the driver keeps of a streamed rollout: every sample's reward and output length
    (by request id), and the layout the ranks train on (request ids per rank, in the order
    sent; tokens per rank; samples that ended in error, never sent; samples whose reward
    failed, scored 0)."""

    rewards: dict[str, float]
    output_lens: dict[str, int]
    rank_request_ids: tuple[tuple[str, ...], ...]
    num_tokens: tuple[int, ...]
    num_dropped: int
    num_reward_errors: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutFinished(Message):
    """Scheduler -> driver: every sample, and what the scheduler recorded. A streamed
    rollout's samples come without tokens and logprobs (they went to the trainer ranks);
    `stream` then says where. A large rollout comes in bounded messages: `num_parts`
    `RolloutPart`s first (in order), then this with the rest of the samples and of the
    record's chunk and request records."""

    rollout_id: str
    samples: tuple[SampleResult, ...]
    record: RolloutRecord
    stream: StreamSummary | None = None
    num_parts: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutPart(Message):
    """Scheduler -> driver, before `RolloutFinished`: part `seq` (0, 1, ...) of a rollout's
    results, samples and the record's chunk and request records that the last message
    does not carry (they go before the last message's own, in order)."""

    rollout_id: str
    seq: int
    samples: tuple[SampleResult, ...]
    chunks: tuple[ChunkRecord, ...]
    requests: tuple[RequestRecord, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutFailed(Message):
    rollout_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRollout(Message):
    """Driver -> scheduler (call): the driver stopped waiting for rollout `rollout_id`
    (cancelled, timed out): dispatch none of its chunks, drop its results, free the
    scheduler for the next rollout (also when its requests have not arrived yet)."""

    rollout_id: str
