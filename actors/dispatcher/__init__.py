"""Earl's data dispatcher: each finished sample goes straight to the trainer rank that trains it.

- ``core``: the pure plan (``DispatchPlan``: token-balanced assignment, group advantages when
  a group completes, dropped errors, the layouts; ``lpt_assign`` for the centralized path).
- ``actor``: its async shell (``Dispatcher``: send, end, finish over a mailbox), run inside
  the scheduler or the driver.
- ``stream``: direct dispatch from the scheduler (``SampleStream``: score, dispatch, count).
- ``options``: ``DispatcherOptions``.

The receiving side, on each trainer rank, is ``actors.trainer.shard.ShardBuffer``; the errors
are ``actors.errors.DispatchError`` and ``RankLost``. ``core`` and ``actor`` import torch (the
trainer's GRPO math), so only the light names are re-exported here: the scheduler imports this
package at start and the dispatcher's shell only when a rollout streams.
"""

from actors.dispatcher.options import DispatcherOptions
from actors.dispatcher.stream import Reward, SampleStream, StreamError, load_scorer
from actors.errors import DispatchError, RankLost

__all__ = [
    "DispatchError",
    "DispatcherOptions",
    "RankLost",
    "Reward",
    "SampleStream",
    "StreamError",
    "load_scorer",
]
