"""A trainer rank's receiving side of the dispatcher: its shard, collected and checked.

``ShardBuffer`` (pure) collects the samples (``SampleDispatched``) and group advantages
(``GroupAdvantages``) the dispatcher (``actors.dispatcher``) sends this rank and, given the
layout, returns the rank's training ``Shard``, or raises ``DispatchError`` if anything is
missing or extra: nothing is lost silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from actors.errors import DispatchError
from actors.trainer.batch import TrainSample
from transport.messages import GroupAdvantages, SampleData, ShardEnd, ShardLayout


def imbalance(loads: Sequence[float]) -> float:
    """max / mean of the per-rank loads (1.0 is perfect; 1.0 when everything is empty)."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else 1.0


def train_sample_of(data: SampleData) -> TrainSample:
    """A dispatched sample as the trainer takes it (the inverse of the dispatcher's
    ``sample_data``)."""
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
