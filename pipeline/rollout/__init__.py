"""The rollout as a library: `Rollout` (api.py) is the surface other trainers embed.

`async with Rollout(topology) as r: groups = await r.generate(prompts, group_size=8)`.
The records' helpers (metrics, traces, plots, workloads; pipeline/records/) are re-exported
here for the embedding user's convenience.
"""

from pipeline.records.metrics import compute_metrics, save_metrics
from pipeline.records.plot import plot_timeline
from pipeline.records.trace import load_trace, save_trace
from pipeline.records.workload import (
    Workload,
    WorkloadPrompt,
    describe,
    make_workload,
    true_lengths,
    workload_from_trace,
)
from pipeline.rollout.api import (
    GeneratorsLost,
    Group,
    OffPolicyError,
    Rollout,
    RolloutError,
    RolloutResult,
    SchedulerLost,
    WeightsError,
    WeightsRefused,
    rollout_config,
)
from pipeline.rollout.checks import InvalidPromptError, InvalidSamplingError, RolloutInputError

__all__ = [
    "GeneratorsLost",
    "Group",
    "InvalidPromptError",
    "InvalidSamplingError",
    "OffPolicyError",
    "Rollout",
    "RolloutError",
    "RolloutInputError",
    "RolloutResult",
    "SchedulerLost",
    "WeightsError",
    "WeightsRefused",
    "Workload",
    "WorkloadPrompt",
    "compute_metrics",
    "describe",
    "load_trace",
    "make_workload",
    "plot_timeline",
    "rollout_config",
    "save_metrics",
    "save_trace",
    "true_lengths",
    "workload_from_trace",
]
