"""The RL loop's step across trainer ranks: each rank gets its shard, then all train.

With `RunConfig.trainer_ranks` > 1 the trainer is R processes (one torch.distributed rank
each) and samples reach them by one of two paths (`RunConfig.dispatch`):

- **direct** (default, Earl): the scheduler scores each sample where it finishes and sends it
  straight to its rank (`actors/dispatcher/stream.py`: token-balanced, group advantages when a
  group completes, samples that ended in `error` dropped and counted); the driver announces
  the rollout (`stream_spec`) and gets back only rewards, lengths and the layout
  (`StreamSummary`), then `train_streamed` gives every rank its layout and they train.
- **driver** (the comparison): the driver gathers the whole rollout, scores it, and sends
  every sample from here to its rank (`train_across_ranks`, the same `Dispatcher`).

Either way the ranks take one data-parallel step and rank 0 publishes the weights.

A rank that dies or hangs fails the iteration within seconds with `RankLost` naming it:
while it dispatches (driver path) and trains (both paths), the driver watches every rank
(its process, its heartbeat: `Cluster.trouble`), so a rank that exits, stops, or stays
silent for `silent_after_s` ends the step; a send or call that fails because a rank died is
reported as that rank's loss too (not as the survivor whose collective then broke). The
survivors' own collectives time out after `TrainerOptions.collective_timeout_s`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio

from actors.dispatcher.actor import Dispatcher, train_layouts
from actors.dispatcher.core import agreed_version, sample_data, streamed_layouts
from actors.dispatcher.options import DispatcherOptions
from actors.errors import DispatchError, RankLost
from actors.trainer.wire import train_sample
from pipeline.launch import Cluster
from pipeline.rollout import Rollout
from pipeline.rollout.api import Group
from pipeline.tasks import Task, TaskPrompt
from pipeline.tasks.scoring import prompt_meta
from transport.messages import (
    LoadCheckpoint,
    Message,
    SamplingSpec,
    StreamSummary,
    StreamToRanks,
    TrainReport,
    TrainSampleSpec,
)


async def train_across_ranks(
    rollout: Rollout,
    num_ranks: int,
    group_size: int,
    *,
    iteration: int,
    scored: Sequence[TrainSampleSpec],
    groups: Sequence[Group],
    sampling: SamplingSpec,
    silent_after_s: float = 10.0,
) -> list[TrainReport]:
    """Dispatch one iteration's scored samples (the driver's `score`, in its order: every
    sample of `groups`, errors included, which the dispatcher drops) to the ranks and train;
    every rank's report. Raises `RankLost` when a rank dies or goes silent meanwhile."""
    cluster = rollout.cluster
    if cluster is None:
        raise RuntimeError("use `async with Rollout(...)` first")
    dispatcher = Dispatcher(
        cluster.mailbox,
        num_ranks,
        group_size,
        iteration=iteration,
        sampling=sampling,
        opts=DispatcherOptions(train_timeout_s=rollout.timeout_s),
    )

    async def dispatch_and_train() -> list[TrainReport]:
        finished = [s for g in groups for s in g.samples]
        for spec, s in zip(scored, finished, strict=True):
            sample = train_sample(spec, request_id=s.request_id)
            await dispatcher.send(sample_data(sample), is_error=s.finish_reason == "error")
        return await dispatcher.finish()

    reports = await watch_ranks(cluster, num_ranks, dispatch_and_train, silent_after_s)
    agreed_version(reports)
    return reports


def stream_spec(
    task: Task,
    prompt_ids: Sequence[str],
    prompts: Sequence[TaskPrompt],
    *,
    iteration: int,
    num_ranks: int,
    group_size: int,
    step_credit: bool = False,
    spec: str = "",
    model_dir: str = "",
) -> StreamToRanks:
    """The announcement of a rollout streamed to the ranks (the rollout id is filled in by
    `Rollout.generate_with_record`); `spec`: the run's task as configured (a registered name
    or an import path; default the task's name), which the scheduler's scorer builds with
    `model_dir`."""
    return StreamToRanks(
        rollout_id="",
        iteration=iteration,
        num_ranks=num_ranks,
        group_size=group_size,
        task=spec or task.name,
        prompts=tuple(prompt_meta(pid, p) for pid, p in zip(prompt_ids, prompts, strict=True)),
        step_credit=step_credit,
        model_dir=model_dir,
    )


async def train_streamed(
    rollout: Rollout,
    summary: StreamSummary,
    *,
    iteration: int,
    sampling: SamplingSpec,
    silent_after_s: float = 10.0,
) -> list[TrainReport]:
    """The ranks already hold their samples (streamed by the scheduler): each learns its
    layout and they train; every rank's report, in rank order."""
    cluster = rollout.cluster
    if cluster is None:
        raise RuntimeError("use `async with Rollout(...)` first")
    layouts = streamed_layouts(summary, iteration, sampling)

    async def train() -> list[TrainReport]:
        return await train_layouts(cluster.mailbox, layouts, "trainer", rollout.timeout_s)

    reports = await watch_ranks(cluster, len(layouts), train, silent_after_s)
    agreed_version(reports)
    return reports


async def load_on_every_rank(rollout: Rollout, num_ranks: int, path: str) -> TrainReport:
    """Every rank restores the checkpoint (rank 0 publishes); rank 0's report."""
    replies: list[Message] = []
    for rank in range(num_ranks):
        replies.append(await rollout.call_actor("trainer", LoadCheckpoint(path=path), rank))
    report = replies[0]
    assert isinstance(report, TrainReport)
    return report


T = TypeVar("T")
WATCH_S = 0.25  # how often the ranks are checked
GRACE_S = 2.0  # after a failed send / call: how long a dying rank may take to show as gone


async def watch_ranks(
    cluster: Cluster,
    num_ranks: int,
    work: Callable[[], Awaitable[T]],
    silent_after_s: float = 10.0,
    role: str = "trainer",
) -> T:
    """`work()`'s result, unless a rank dies, stops or stays silent for `silent_after_s`
    first: then `work` is cancelled and `RankLost` names the rank. When `work` fails with a
    `DispatchError` and a rank turns out to be gone (within `GRACE_S`), that rank's loss is
    raised instead (a dead peer also breaks the survivors' collectives)."""

    async def lost_rank() -> RankLost | None:
        await cluster.poll_control()
        for rank in range(num_ranks):
            trouble = cluster.trouble(role, rank, silent_after_s)
            if trouble:
                return RankLost(rank, trouble)
        return None

    results: list[T] = []
    lost: list[RankLost] = []

    async def run(scope: anyio.CancelScope) -> None:
        results.append(await work())
        scope.cancel()

    async def watch(scope: anyio.CancelScope) -> None:
        while True:
            await anyio.sleep(WATCH_S)
            found = await lost_rank()
            if found is not None:
                lost.append(found)
                scope.cancel()
                return

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, tg.cancel_scope)
            tg.start_soon(watch, tg.cancel_scope)
    except BaseExceptionGroup as group:
        first = _first_leaf(group)
        if not isinstance(first, DispatchError):
            raise first from None
        found = None
        with anyio.move_on_after(GRACE_S):
            while (found := await lost_rank()) is None:
                await anyio.sleep(WATCH_S)
        if found is not None:
            raise found from first
        raise first from None
    if lost:
        raise lost[0]
    return results[0]


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
