"""The RL loop's step across trainer ranks: the dispatcher feeds each rank its shard.

With `RunConfig.trainer_ranks` > 1 the trainer is R processes (one torch.distributed rank
each). After scoring, every sample goes straight from the driver to the rank that trains it
(`Dispatcher`: token-balanced, group advantages sent when a group completes, samples that
ended in `error` dropped on every rank and counted); then every rank learns its layout and
the ranks take one data-parallel step; rank 0 publishes the weights. Rewards are computed
by the driver (the task's verifier lives here), so in `seer run` the samples leave from the
driver once scored; `seer bench dispatch` measures streaming from where samples finish.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.trainer.batch import TrainSample
from actors.trainer.dispatch import DispatchError, sample_data
from actors.trainer.dispatcher import Dispatcher
from pipeline.rollout import Rollout
from pipeline.rollout.api import Group
from pipeline.tasks import Task, TaskPrompt
from transport.messages import LoadCheckpoint, Message, SamplingSpec, TrainReport


async def train_across_ranks(
    rollout: Rollout,
    num_ranks: int,
    group_size: int,
    *,
    iteration: int,
    task: Task,
    prompts: Sequence[TaskPrompt],
    groups: Sequence[Group],
    sampling: SamplingSpec,
) -> TrainReport:
    """Dispatch one iteration's scored samples to the ranks and train; rank 0's report."""
    cluster = rollout.cluster
    if cluster is None:
        raise RuntimeError("use `async with Rollout(...)` first")
    dispatcher = Dispatcher(
        cluster.mailbox,
        num_ranks,
        group_size,
        iteration=iteration,
        expected_version=rollout.weight_version,
        sampling=sampling,
        train_timeout_s=rollout.timeout_s,
    )
    for prompt, group in zip(prompts, groups, strict=True):
        for s in group.samples:
            sample = TrainSample(
                prompt_ids=prompt.token_ids,
                completion_ids=s.token_ids,
                old_logprobs=s.logprobs,
                reward=task.reward(prompt, s.token_ids),
                group_id=s.group_id,
                weight_versions=s.weight_versions,
                request_id=s.request_id,
            )
            await dispatcher.send(sample_data(sample), is_error=s.finish_reason == "error")
    reports = await dispatcher.finish()
    versions = {r.version for r in reports}
    if len(versions) != 1:
        raise DispatchError(f"trainer ranks disagree on the version after the step: {versions}")
    return reports[0]


async def load_on_every_rank(rollout: Rollout, num_ranks: int, path: str) -> TrainReport:
    """Every rank restores the checkpoint (rank 0 publishes); rank 0's report."""
    replies: list[Message] = []
    for rank in range(num_ranks):
        replies.append(await rollout.call_actor("trainer", LoadCheckpoint(path=path), rank))
    report = replies[0]
    assert isinstance(report, TrainReport)
    return report
