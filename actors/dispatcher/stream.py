"""SampleStream: Earl's direct dispatch, run inside the scheduler where samples finish.

A rollout the driver announced with `StreamToRanks` gets one `SampleStream`. As each sample
finishes, the scheduler hands it here: it is scored at once (the task's verifier is a pure
function of the prompt's metadata and the tokens, resolved from the scheduler's `scorer`
option, never from the wire) and sent straight to the trainer rank with the fewest tokens so
far (`Dispatcher`); a group's advantages follow when its last member finishes; a sample that
ended in "error" is never sent and is counted. At the end `flush` sends every rank its
`ShardEnd` at once (its request ids, the last groups' advantages and, on its rank, the
rollout's last sample, which `add(last=True)` held back; over the same socket as its
samples: a rank handles its messages in order) and awaits the `ShardHeld` acks
concurrently, so each rank holds its whole shard, checked, before the driver hears
the rollout finished; a rank that is gone or whose shard does not match raises
`DispatchError` naming it. `summary` is all the driver gets back: rewards,
output lengths and the layout, no token arrays.

The dispatcher's shell (and with it the trainer's GRPO math and torch) is imported only when a
rollout streams: the scheduler imports this module at start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from transport.messages import (
    RequestSpec,
    SampleData,
    SamplingSpec,
    StreamSummary,
    StreamToRanks,
)

if TYPE_CHECKING:
    from actors.base import Mailbox
    from actors.dispatcher.actor import Dispatcher

Reward = Callable[[str, Mapping[str, Any], Sequence[int], Sequence[int]], float]
"""(prompt id, prompt metadata, prompt token ids, completion token ids) -> reward. A scorer
that can also locate a failed sample's first wrong token has a method `error_index(same
arguments, reward) -> int` (-1: none); a rollout announced with `step_credit` uses it."""


class StreamError(ValueError):
    """A `StreamToRanks` the scheduler cannot serve (no scorer, too few ranks, ...)."""


def load_scorer(path: str, task: str, model_dir: str = "") -> Reward:
    """The reward function of `task` from the factory at import path `path`
    ("package.module:function", taking the task spec, and `model_dir=` when the run has a
    model folder; a trusted config value). A scorer that counts the samples whose reward
    failed has an int attribute `num_reward_errors`."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise StreamError(f"scorer {path!r} is not 'package.module:function'")
    try:
        factory = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise StreamError(f"scorer {path!r} cannot be imported: {exc}") from None
    try:
        reward: Reward = factory(task, model_dir=model_dir) if model_dir else factory(task)
    except (KeyError, ValueError) as exc:
        raise StreamError(f"scorer {path!r} has no task {task!r}: {exc}") from None
    return reward


class SampleStream:
    """One streamed rollout: score, dispatch, count; see the module docstring."""

    def __init__(
        self, mailbox: Mailbox, msg: StreamToRanks, reward: Reward, *, send_timeout_s: float
    ) -> None:
        from actors.dispatcher.actor import Dispatcher
        from actors.dispatcher.options import DispatcherOptions

        self.msg = msg
        self.reward = reward
        self.meta = {p.prompt_id: p.meta for p in msg.prompts}
        self.dispatcher: Dispatcher = Dispatcher(
            mailbox,
            msg.num_ranks,
            msg.group_size,
            iteration=msg.iteration,
            sampling=SamplingSpec(),  # the layout (and its sampling) comes from the driver
            opts=DispatcherOptions(send_timeout_s=send_timeout_s),
        )
        self.rewards: dict[str, float] = {}
        self.output_lens: dict[str, int] = {}
        self.num_reward_errors_before = self._num_reward_errors()

    def _num_reward_errors(self) -> int:
        return int(getattr(self.reward, "num_reward_errors", 0))

    async def add(
        self,
        spec: RequestSpec,
        token_ids: Sequence[int],
        logprobs: Sequence[float],
        weight_versions: tuple[int, ...],
        finish_reason: str,
        *,
        last: bool = False,
    ) -> None:
        """A sample finished: score it and send it to its rank (or drop it: "error");
        ``last``: the rollout's last one (it goes with its rank's end, `flush`)."""
        if spec.prompt_id not in self.meta:
            raise StreamError(f"no metadata for prompt {spec.prompt_id!r} of {spec.request_id}")
        meta = self.meta[spec.prompt_id]
        reward = float(self.reward(spec.prompt_id, meta, spec.prompt_ids, token_ids))
        error_index = -1
        locate = getattr(self.reward, "error_index", None)  # step credit, if the scorer can
        if self.msg.step_credit and locate is not None:
            error_index = int(locate(spec.prompt_id, meta, spec.prompt_ids, token_ids, reward))
        self.rewards[spec.request_id] = reward
        self.output_lens[spec.request_id] = len(token_ids)
        data = sample_data(spec, token_ids, logprobs, weight_versions, reward, error_index)
        await self.dispatcher.send(data, is_error=finish_reason == "error", last=last)

    async def flush(self, timeout_s: float) -> None:
        """Return once every rank holds its whole shard (one `ShardEnd` per rank, at once)."""
        await self.dispatcher.end(timeout_s)

    def summary(self) -> StreamSummary:
        plan = self.dispatcher.plan
        return StreamSummary(
            rewards=dict(self.rewards),
            output_lens=dict(self.output_lens),
            rank_request_ids=tuple(tuple(ids) for ids in plan.request_ids),
            num_tokens=tuple(plan.loads),
            num_dropped=plan.num_dropped,
            num_reward_errors=self._num_reward_errors() - self.num_reward_errors_before,
        )


def sample_data(
    spec: RequestSpec,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    weight_versions: tuple[int, ...],
    reward: float,
    error_index: int = -1,
) -> SampleData:
    """A finished request as the arrays a trainer rank consumes (prompt + completion)."""
    from actors.dispatcher.core import request_arrays  # torch: only when a rollout streams

    return request_arrays(
        spec.request_id,
        spec.group_id,
        spec.prompt_ids,
        token_ids,
        logprobs,
        reward=reward,
        weight_versions=weight_versions,
        error_index=error_index,
    )
