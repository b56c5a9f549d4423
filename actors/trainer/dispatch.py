"""Earl's data dispatcher: each finished sample goes straight to the trainer rank that trains it.

The sending side (``DispatchPlan``, pure; ``Dispatcher``, its async shell) sits where samples
finish. Each sample is assigned, the moment it finishes, to the rank with the fewest tokens so
far (online longest-processing-time: greedy least-loaded; with many samples per rank the final
imbalance max/mean is at most 1 + longest sample / mean rank load) and sent there at once. A
GRPO group may therefore span ranks; its advantages are computed here when its last member
finishes and sent (``GroupAdvantages``, a few bytes) to the ranks holding its members. A
sample that ended in ``error`` is never sent: it is dropped from its group (the advantages are
over the others) and counted in ``num_dropped``, identically for every rank. At the end every
rank gets the layout (``ShardLayout``, a call): which requests it holds, the sampling
transform of the logprobs and the weight version, and trains; it answers with its report.

The receiving side (``ShardBuffer``, pure) collects samples and advantages and, given the
layout, returns the rank's training shard, or raises ``DispatchError`` if anything is missing
or extra. A rank that died, or a send that cannot complete, raises ``DispatchError`` on the
sending side naming the rank: nothing is lost silently.

``lpt_assign`` (offline LPT over whole groups) is the centralized path's assignment: the
controller holds the whole batch, so it can sort first.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from actors.trainer.batch import TrainSample
from actors.trainer.grpo import group_advantages
from transport.messages import (
    GroupAdvantages,
    SampleData,
    SamplingSpec,
    ShardEnd,
    ShardLayout,
)


class DispatchError(RuntimeError):
    """A sample could not reach its rank, or a rank's shard does not match its layout."""


class RankLost(DispatchError):
    """Trainer rank `rank` died or went silent during an iteration's dispatch or step."""

    def __init__(self, rank: int, reason: str) -> None:
        super().__init__(f"trainer rank {rank} lost: {reason}")
        self.rank = rank
        self.reason = reason


def lpt_assign(sizes: Sequence[int], num_ranks: int) -> list[int]:
    """Offline LPT: items (largest first) to the least-loaded rank; the rank of each item."""
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be >= 1, got {num_ranks}")
    heap = [(0, r) for r in range(num_ranks)]
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        load, rank = heapq.heappop(heap)
        out[i] = rank
        heapq.heappush(heap, (load + sizes[i], rank))
    return out


def imbalance(loads: Sequence[float]) -> float:
    """max / mean of the per-rank loads (1.0 is perfect; 1.0 when everything is empty)."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else 1.0


def group_advantage_message(
    iteration: int, group_id: str, members: Sequence[tuple[str, float]]
) -> GroupAdvantages:
    """The advantages of a complete group, as ``make_batch`` computes them."""
    rewards = torch.tensor([r for _, r in members], dtype=torch.float32)
    adv = group_advantages(rewards)
    return GroupAdvantages(
        iteration=iteration,
        group_id=group_id,
        request_ids=tuple(rid for rid, _ in members),
        advantages=tuple(float(a) for a in adv),
        is_flat=len({r for _, r in members}) < 2,
    )


@dataclass
class _Group:
    members: list[tuple[str, float]] = field(default_factory=list)  # (request id, reward)
    ranks: set[int] = field(default_factory=set)
    num_finished: int = 0


class DispatchPlan:
    """Online assignment of one iteration's samples to ranks (no sockets, no await)."""

    def __init__(self, num_ranks: int, group_size: int, iteration: int = 0) -> None:
        if num_ranks < 1 or group_size < 1:
            raise ValueError("DispatchPlan needs num_ranks >= 1 and group_size >= 1")
        self.num_ranks, self.group_size, self.iteration = num_ranks, group_size, iteration
        self.loads = [0] * num_ranks  # tokens per rank
        self.request_ids: list[list[str]] = [[] for _ in range(num_ranks)]
        self.num_dropped = 0
        self._groups: dict[str, _Group] = defaultdict(_Group)
        self._seen: set[str] = set()

    def add(
        self, request_id: str, group_id: str, num_tokens: int, reward: float, is_error: bool
    ) -> tuple[int | None, GroupAdvantages | None, list[int]]:
        """A sample finished: (its rank, or None if dropped; the group's advantages if it is
        now complete, else None; the ranks that need them)."""
        if request_id in self._seen:
            raise DispatchError(f"request {request_id} dispatched twice")
        self._seen.add(request_id)
        group = self._groups[group_id]
        group.num_finished += 1
        if group.num_finished > self.group_size:
            raise DispatchError(f"group {group_id} has more than {self.group_size} samples")
        rank: int | None = None
        if is_error:
            self.num_dropped += 1
        else:
            rank = min(range(self.num_ranks), key=lambda r: (self.loads[r], r))
            self.loads[rank] += num_tokens
            self.request_ids[rank].append(request_id)
            group.members.append((request_id, reward))
            group.ranks.add(rank)
        if group.num_finished < self.group_size or not group.members:
            return rank, None, []
        message = group_advantage_message(self.iteration, group_id, group.members)
        return rank, message, sorted(group.ranks)

    @property
    def incomplete_groups(self) -> list[str]:
        return sorted(g for g, s in self._groups.items() if s.num_finished < self.group_size)

    def layout(self, rank: int, sampling: SamplingSpec) -> ShardLayout:
        return ShardLayout(
            iteration=self.iteration,
            rank=rank,
            request_ids=tuple(self.request_ids[rank]),
            num_samples=tuple(len(ids) for ids in self.request_ids),
            num_tokens=tuple(self.loads),
            num_dropped=self.num_dropped,
            sampling=sampling,
        )


def sample_data(sample: TrainSample) -> SampleData:
    """A trainer sample in the dispatcher's array format."""
    return request_arrays(
        sample.request_id,
        sample.group_id,
        sample.prompt_ids,
        sample.completion_ids,
        sample.old_logprobs,
        reward=sample.reward,
        weight_versions=sample.weight_versions,
        error_index=sample.error_index,
    )


def request_arrays(
    request_id: str,
    group_id: str,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    logprobs: Sequence[float],
    *,
    reward: float,
    weight_versions: tuple[int, ...],
    error_index: int = -1,
) -> SampleData:
    """One finished request as the arrays a trainer rank consumes: prompt + completion
    tokens, the completion's old logprobs and loss mask (zero over the prompt)."""
    p = len(prompt_ids)
    tokens = np.asarray((*prompt_ids, *completion_ids), dtype=np.int32)
    old = np.zeros(len(tokens), dtype=np.float32)
    old[p:] = np.asarray(logprobs, dtype=np.float32)
    mask = np.zeros(len(tokens), dtype=np.uint8)
    mask[p:] = 1
    return SampleData(
        request_id=request_id,
        group_id=group_id,
        prompt_len=p,
        token_ids=tokens,
        old_logprobs=old,
        loss_mask=mask,
        reward=reward,
        weight_versions=weight_versions,
        error_index=error_index,
    )


def train_sample_of(data: SampleData) -> TrainSample:
    p = data.prompt_len
    tokens = np.asarray(data.token_ids).astype(np.int64).tolist()
    logprobs = np.asarray(data.old_logprobs, dtype=np.float32)[p:].tolist()
    return TrainSample(
        prompt_ids=tuple(tokens[:p]),
        completion_ids=tuple(tokens[p:]),
        old_logprobs=tuple(logprobs),
        reward=data.reward,
        group_id=data.group_id,
        weight_versions=data.weight_versions,
        request_id=data.request_id,
        error_index=data.error_index,
    )


@dataclass(frozen=True, slots=True)
class Shard:
    """A rank's training input: samples, each one's advantage, and the share of a flat group
    it stands for (1/G for a member of a flat group, else 0)."""

    samples: tuple[TrainSample, ...]
    advantages: tuple[float, ...]
    flat_share: tuple[float, ...]


class ShardBuffer:
    """The receiving side on one rank: samples and advantages of one iteration. `hold`
    checks the shard is complete when its end arrives; `take` builds it for training."""

    def __init__(self) -> None:
        self.samples: dict[str, SampleData] = {}
        self.num_tokens = 0  # loss tokens of the samples held, counted as they arrive
        self.advantages: dict[str, tuple[float, float]] = {}  # request id -> (adv, flat share)
        self.iteration: int | None = None
        self.held: tuple[int, tuple[str, ...]] | None = None  # (iteration, request ids)

    def _check_iteration(self, iteration: int) -> None:
        if self.iteration is None:
            self.iteration = iteration
        elif iteration != self.iteration:
            raise DispatchError(f"iteration {iteration} data while {self.iteration} is open")

    def add_sample(self, iteration: int, data: SampleData) -> None:
        self._check_iteration(iteration)
        if data.request_id in self.samples:
            raise DispatchError(f"request {data.request_id} received twice")
        self.samples[data.request_id] = data
        self.num_tokens += int(data.loss_mask.sum())  # here, not at the end: off its path

    def add_advantages(self, msg: GroupAdvantages) -> None:
        self._check_iteration(msg.iteration)
        share = 1.0 / len(msg.request_ids) if msg.is_flat else 0.0
        for rid, adv in zip(msg.request_ids, msg.advantages, strict=True):
            self.advantages[rid] = (adv, share)

    def hold(self, end: ShardEnd) -> int:
        """The end of this rank's shard arrived: add its advantages and check the shard is
        exactly there (`DispatchError` otherwise); its number of loss tokens."""
        self._check_iteration(end.iteration)
        for sample in end.samples:  # the last ones, riding in the end message
            self.add_sample(end.iteration, sample)
        rows = zip(end.adv_request_ids, end.advantages, end.flat_share, strict=True)
        for rid, adv, share in rows:
            self.advantages[rid] = (adv, share)
        self._check(end.iteration, end.rank, end.request_ids)
        self.held = (end.iteration, end.request_ids)
        return self.num_tokens  # _check: the samples held are exactly the end's

    def take(self, layout: ShardLayout) -> Shard:
        """This rank's shard in layout order; ``DispatchError`` if it is not exactly there
        (or not the shard `hold` saw end)."""
        if self.held is not None and self.held != (layout.iteration, layout.request_ids):
            iteration, ids = self.held
            raise DispatchError(
                f"rank {layout.rank}: the layout of iteration {layout.iteration} "
                f"({len(layout.request_ids)} requests) is not the shard held for "
                f"iteration {iteration} ({len(ids)} requests)"
            )
        if self.iteration not in (None, layout.iteration):
            raise DispatchError(f"holding iteration {self.iteration}, layout is {layout.iteration}")
        self._check(layout.iteration, layout.rank, layout.request_ids)
        request_ids = layout.request_ids
        samples = tuple(train_sample_of(self.samples[r]) for r in request_ids)
        adv = tuple(self.advantages[r][0] for r in request_ids)
        share = tuple(self.advantages[r][1] for r in request_ids)
        self.samples, self.advantages, self.iteration, self.held = {}, {}, None, None
        self.num_tokens = 0
        return Shard(samples, adv, share)

    def _check(self, iteration: int, rank: int, request_ids: tuple[str, ...]) -> None:
        missing = [r for r in request_ids if r not in self.samples]
        extra = sorted(set(self.samples) - set(request_ids))
        no_adv = [r for r in request_ids if r not in self.advantages]
        if missing or extra or no_adv:
            raise DispatchError(
                f"rank {rank}, iteration {iteration}: {len(missing)} samples "
                f"missing {missing[:3]}, {len(extra)} unexpected {extra[:3]}, {len(no_adv)} "
                f"without advantages {no_adv[:3]}"
            )
