"""The dispatcher's pure core: which rank each finished sample goes to, and what it carries.

``DispatchPlan`` sits where samples finish (the scheduler's stream, or the driver). Each
sample is assigned, the moment it finishes, to the rank with the fewest tokens so far
(online longest-processing-time: greedy least-loaded; with many samples per rank the final
imbalance max/mean is at most 1 + longest sample / mean rank load). A GRPO group may
therefore span ranks; its advantages are computed here when its last member finishes
(``group_advantage_message``, a few bytes) for the ranks holding its members. A sample that
ended in ``error`` is never sent: it is dropped from its group (the advantages are over the
others) and counted in ``num_dropped``, identically for every rank. At the end every rank
gets the layout (``ShardLayout``): which requests it holds, the sampling transform of the
logprobs and the weight version. ``streamed_layouts`` builds the same layouts from what the
scheduler's stream reports (``StreamSummary``); ``agreed_version`` checks the ranks' reports.

The receiving side, on each trainer rank, is ``actors.trainer.shard.ShardBuffer``.
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

from actors.errors import DispatchError
from actors.trainer.batch import TrainSample
from actors.trainer.grpo import group_advantages
from actors.trainer.shard import imbalance as imbalance  # how uneven the ranks' loads are
from transport.messages import (
    GroupAdvantages,
    SampleData,
    SamplingSpec,
    ShardLayout,
    StreamSummary,
    TrainReport,
)


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


def streamed_layouts(
    summary: StreamSummary, iteration: int, sampling: SamplingSpec
) -> list[ShardLayout]:
    """Every rank's layout, in rank order, of a rollout the scheduler streamed to the ranks
    (its ``StreamSummary``): what ``DispatchPlan.layout`` gives on the sending side."""
    sizes = tuple(len(ids) for ids in summary.rank_request_ids)
    return [
        ShardLayout(
            iteration=iteration,
            rank=rank,
            request_ids=ids,
            num_samples=sizes,
            num_tokens=summary.num_tokens,
            num_dropped=summary.num_dropped,
            sampling=sampling,
        )
        for rank, ids in enumerate(summary.rank_request_ids)
    ]


def agreed_version(reports: Sequence[TrainReport]) -> int:
    """The weight version every rank reports after the step (``DispatchError`` if they
    disagree)."""
    versions = {r.version for r in reports}
    if len(versions) != 1:
        raise DispatchError(f"trainer ranks disagree on the version after the step: {versions}")
    return versions.pop()
