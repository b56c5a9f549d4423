"""Dispatcher: the async shell of ``DispatchPlan``, on the side where samples finish.

``send(sample)`` assigns the sample to a rank and sends it there at once (one-way, bounded by
``send_timeout_s``); when its group completes, the group's advantages follow to the ranks that
hold its members. ``finish()`` calls every rank with its ``ShardLayout`` concurrently; the
ranks train (data-parallel, gradients all-reduced) and answer with their ``TrainReport``
(rank 0's carries the published version). A rank that is gone, a send that cannot complete,
or a rank whose shard does not match its layout raises ``DispatchError`` naming the rank.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio

from actors.base import Mailbox
from actors.trainer.dispatch import DispatchError, DispatchPlan, imbalance
from transport.errors import TransportError
from transport.messages import (
    Message,
    SampleData,
    SampleDispatched,
    SamplingSpec,
    ShardLayout,
    TrainReport,
)


class Dispatcher:
    def __init__(
        self,
        mailbox: Mailbox,
        num_ranks: int,
        group_size: int,
        *,
        iteration: int,
        expected_version: int,
        sampling: SamplingSpec,
        role: str = "trainer",
        send_timeout_s: float = 30.0,
        train_timeout_s: float = 600.0,
    ) -> None:
        self.mailbox = mailbox
        self.plan = DispatchPlan(num_ranks, group_size, iteration)
        self.expected_version = expected_version
        self.sampling = sampling
        self.role = role
        self.send_timeout_s = send_timeout_s
        self.train_timeout_s = train_timeout_s

    async def send(self, sample: SampleData, *, is_error: bool = False) -> int | None:
        """Dispatch one finished sample; its rank (None: dropped because it ended in error)."""
        num_tokens = int(sample.loss_mask.sum())
        rank, advantages, ranks = self.plan.add(
            sample.request_id, sample.group_id, num_tokens, sample.reward, is_error
        )
        if rank is not None:
            await self._send(rank, SampleDispatched(iteration=self.plan.iteration, sample=sample))
        if advantages is not None:
            for r in ranks:
                await self._send(r, advantages)
        return rank

    async def _send(self, rank: int, msg: Message) -> None:
        try:
            with anyio.fail_after(self.send_timeout_s):
                await self.mailbox.send_to(self.role, rank, msg)
        except (TimeoutError, TransportError) as exc:
            raise DispatchError(
                f"{type(msg).__name__} to {self.role} rank {rank} failed: {exc or 'timed out'}"
            ) from exc

    @property
    def imbalance(self) -> float:
        return imbalance(self.plan.loads)

    async def finish(self) -> list[TrainReport]:
        """Every rank learns its layout and trains; their reports in rank order."""
        if self.plan.incomplete_groups:
            raise DispatchError(f"incomplete groups at the end: {self.plan.incomplete_groups[:5]}")
        layouts = [
            self.plan.layout(rank, self.expected_version, self.sampling)
            for rank in range(self.plan.num_ranks)
        ]
        return await train_layouts(self.mailbox, layouts, self.role, self.train_timeout_s)


async def train_layouts(
    mailbox: Mailbox, layouts: Sequence[ShardLayout], role: str, timeout_s: float
) -> list[TrainReport]:
    """Call every rank with its layout at once (they train together); reports in rank
    order; the first failure as a `DispatchError` naming its rank."""
    reports: list[TrainReport | None] = [None] * len(layouts)

    async def train(layout: ShardLayout) -> None:
        rank = layout.rank
        try:
            reply = await mailbox.call(role, rank, layout, timeout_s)
        except TransportError as exc:
            raise DispatchError(f"{role} rank {rank} failed the step: {exc}") from exc
        if not isinstance(reply, TrainReport):
            raise DispatchError(f"{role} rank {rank} answered {type(reply).__name__}")
        reports[rank] = reply

    try:
        async with anyio.create_task_group() as tg:
            for layout in layouts:
                tg.start_soon(train, layout)
    except BaseExceptionGroup as group:  # the first failure cancelled the other calls
        errors = _leaves(group)
        first = next((e for e in errors if isinstance(e, DispatchError)), errors[0])
        raise first from None
    return [r for r in reports if r is not None]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
