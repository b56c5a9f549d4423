"""The rollout: records of what happened, benchmark workloads, metrics, traces and plots.

The records (`transport.messages.RolloutRecord`) are what the scheduler writes during a
rollout; everything here is a pure function of them: `metrics` computes makespan,
throughput, tail, idle time and the lower-bound efficiency; `trace` saves and loads
replayable traces; `plot` draws timelines; `workload` makes the long-tailed,
group-correlated benchmark workload.
"""

from pipeline.rollout.api import (
    Group,
    OffPolicyError,
    Rollout,
    RolloutError,
    RolloutResult,
    SchedulerLost,
    rollout_config,
)
from pipeline.rollout.metrics import compute_metrics, save_metrics
from pipeline.rollout.plot import plot_timeline
from pipeline.rollout.trace import load_trace, save_trace
from pipeline.rollout.workload import (
    Workload,
    WorkloadPrompt,
    describe,
    make_workload,
    true_lengths,
    workload_from_trace,
)

__all__ = [
    "Group",
    "OffPolicyError",
    "Rollout",
    "RolloutError",
    "RolloutResult",
    "SchedulerLost",
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
