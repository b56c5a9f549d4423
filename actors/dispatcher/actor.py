"""Dispatcher: the async shell of ``DispatchPlan``, on the side where samples finish.

It is not an actor process of its own: it runs inside the scheduler (``stream.py``, direct
dispatch) or the driver (``pipeline.rl.ranks``, the comparison path), over their mailbox.
``send(sample)`` assigns the sample to a rank and sends it there at once (one-way, bounded by
``DispatcherOptions.send_timeout_s``); the rollout's last sample (``last=True``) waits for
``end()`` and goes inside its rank's end message. When its group completes, the group's
advantages are kept and go out with the next sample's send (during the rollout) or, for the
last groups, inside the end message. ``end()`` sends every rank its ``ShardEnd`` (its request
ids and those pending advantages) all at once and awaits the ranks' ``ShardHeld`` acks
concurrently: after the rollout's last sample there is exactly one small message per rank and
one round trip, in parallel over the ranks. ``finish()`` is ``end()`` and then every rank's
``ShardLayout`` call (concurrently): the ranks train (data-parallel, gradients all-reduced)
and answer with their ``TrainReport`` (rank 0's carries the published version). A rank that
is gone, a send that cannot complete, or a rank whose shard does not match raises
``DispatchError`` naming the rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import anyio

from actors.base import Mailbox
from actors.dispatcher.core import DispatchPlan, imbalance
from actors.dispatcher.options import DispatcherOptions
from actors.errors import DispatchError
from transport.errors import TransportError
from transport.messages import (
    GroupAdvantages,
    Message,
    SampleData,
    SampleDispatched,
    SamplingSpec,
    ShardEnd,
    ShardHeld,
    ShardLayout,
    TrainReport,
)

R = TypeVar("R", TrainReport, ShardHeld)


class Dispatcher:
    def __init__(
        self,
        mailbox: Mailbox,
        num_ranks: int,
        group_size: int,
        *,
        iteration: int,
        sampling: SamplingSpec,
        opts: DispatcherOptions | None = None,
    ) -> None:
        self.mailbox = mailbox
        self.plan = DispatchPlan(num_ranks, group_size, iteration)
        self.sampling = sampling
        self.opts = opts or DispatcherOptions()
        self.pending: list[tuple[GroupAdvantages, list[int]]] = []  # complete groups, unsent
        self.held: list[tuple[int, SampleData]] = []  # (rank, sample): sent with the end

    async def send(
        self, sample: SampleData, *, is_error: bool = False, last: bool = False
    ) -> int | None:
        """Dispatch one finished sample; its rank (None: dropped because it ended in error).
        ``last``: the rollout's last sample, which `end` is about to follow: it is kept and
        rides in its rank's `ShardEnd`, as do the advantages not sent yet (after the last
        sample finishes, one message per rank, not a sample and advantages ahead of it)."""
        num_tokens = int(sample.loss_mask.sum())
        rank, advantages, ranks = self.plan.add(
            sample.request_id, sample.group_id, num_tokens, sample.reward, is_error
        )
        if last:  # it, and the advantages not sent yet, go with the ends
            if rank is not None:
                self.held.append((rank, sample))
            if advantages is not None:
                self.pending.append((advantages, ranks))
            return rank
        pending, self.pending = self.pending, []
        if rank is not None:
            await self._send(rank, SampleDispatched(iteration=self.plan.iteration, sample=sample))
        for message, to in pending:  # groups completed earlier: off the critical path now
            for r in to:
                await self._send(r, message)
        if advantages is not None:
            self.pending.append((advantages, ranks))
        return rank

    async def _send(self, rank: int, msg: Message) -> None:
        try:
            with anyio.fail_after(self.opts.send_timeout_s):
                await self.mailbox.send_to(self.opts.role, rank, msg)
        except (TimeoutError, TransportError) as exc:
            raise DispatchError(
                f"{type(msg).__name__} to {self.opts.role} rank {rank} failed: {exc or 'timed out'}"
            ) from exc

    @property
    def imbalance(self) -> float:
        return imbalance(self.plan.loads)

    def ends(self) -> list[ShardEnd]:
        """Every rank's end message: its request ids and the advantages still pending."""
        rows: list[list[tuple[str, float, float]]] = [[] for _ in range(self.plan.num_ranks)]
        for message, to in self.pending:
            share = 1.0 / len(message.request_ids) if message.is_flat else 0.0
            for r in to:
                pairs = zip(message.request_ids, message.advantages, strict=True)
                rows[r].extend((rid, adv, share) for rid, adv in pairs)
        return [
            ShardEnd(
                iteration=self.plan.iteration,
                rank=rank,
                request_ids=tuple(self.plan.request_ids[rank]),
                adv_request_ids=tuple(row[0] for row in rows[rank]),
                advantages=tuple(row[1] for row in rows[rank]),
                flat_share=tuple(row[2] for row in rows[rank]),
                samples=tuple(sample for r, sample in self.held if r == rank),
            )
            for rank in range(self.plan.num_ranks)
        ]

    async def end(self, timeout_s: float | None = None) -> list[ShardHeld]:
        """Close the shards: one `ShardEnd` per rank, all sent at once, the acks awaited
        concurrently; every rank's `ShardHeld`, in rank order."""
        if self.plan.incomplete_groups:
            raise DispatchError(f"incomplete groups at the end: {self.plan.incomplete_groups[:5]}")
        ends = self.ends()
        self.pending, self.held = [], []
        timeout = self.opts.send_timeout_s if timeout_s is None else timeout_s
        return await end_shards(self.mailbox, ends, self.opts.role, timeout)

    async def finish(self) -> list[TrainReport]:
        """Every rank holds its shard, then learns its layout and trains; their reports in
        rank order."""
        await self.end()
        layouts = [self.plan.layout(rank, self.sampling) for rank in range(self.plan.num_ranks)]
        return await train_layouts(self.mailbox, layouts, self.opts.role, self.opts.train_timeout_s)


async def train_layouts(
    mailbox: Mailbox, layouts: Sequence[ShardLayout], role: str, timeout_s: float
) -> list[TrainReport]:
    """Call every rank with its layout at once (they train together); reports in the order
    of `layouts`; the first failure as a `DispatchError` naming its rank."""
    return await _call_ranks(mailbox, role, layouts, TrainReport, "failed the step", timeout_s)


async def end_shards(
    mailbox: Mailbox, ends: Sequence[ShardEnd], role: str, timeout_s: float
) -> list[ShardHeld]:
    """Send every rank its `ShardEnd` at once and await the acks concurrently; in the order
    of `ends`. A rank that is gone or whose shard does not match raises `DispatchError`."""
    return await _call_ranks(mailbox, role, ends, ShardHeld, "unreachable at the end", timeout_s)


async def _call_ranks(
    mailbox: Mailbox,
    role: str,
    messages: Sequence[ShardLayout] | Sequence[ShardEnd],
    reply_type: type[R],
    failed: str,
    timeout_s: float,
) -> list[R]:
    """One call per rank (`message.rank`), all in flight at once; the replies in the order of
    `messages`. The first failure cancels the others and is raised as a `DispatchError`."""
    replies: dict[int, R] = {}

    async def call(message: ShardLayout | ShardEnd) -> None:
        rank = message.rank
        try:
            reply = await mailbox.call(role, rank, message, timeout_s)
        except TransportError as exc:
            raise DispatchError(f"{role} rank {rank} {failed}: {exc}") from exc
        if not isinstance(reply, reply_type):
            raise DispatchError(f"{role} rank {rank} answered {type(reply).__name__}")
        replies[rank] = reply

    try:
        async with anyio.create_task_group() as tg:
            for message in messages:
                tg.start_soon(call, message)
    except BaseExceptionGroup as group:  # the first failure cancelled the other calls
        errors = _leaves(group)
        first = next((e for e in errors if isinstance(e, DispatchError)), errors[0])
        raise first from None
    return [replies[m.rank] for m in messages]


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out
