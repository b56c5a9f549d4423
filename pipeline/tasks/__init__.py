"""Tasks and rewards: the ``Task`` interface, the embedded countdown task, and the cached
supervised warm start that gives RL a policy which succeeds sometimes.

``get_task("countdown")`` returns the default; a user plugs in their own by implementing
``Task`` and calling ``register_task``.
"""

from pipeline.tasks.base import Task, TaskPrompt, get_task, register_task, task_names
from pipeline.tasks.countdown import (
    Countdown,
    CountdownConfig,
    count_walks,
    describe_lengths,
)
from pipeline.tasks.warmstart import evaluate, sft_batch, sft_loss, warm_start, warm_start_path

__all__ = [
    "Countdown",
    "CountdownConfig",
    "Task",
    "TaskPrompt",
    "count_walks",
    "describe_lengths",
    "evaluate",
    "get_task",
    "register_task",
    "sft_batch",
    "sft_loss",
    "task_names",
    "warm_start",
    "warm_start_path",
]
