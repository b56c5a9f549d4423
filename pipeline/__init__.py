"""What a user touches, in wings from low to high: config/logs, launch/, records/,
rollout/, tasks/, serve/, rl/, sim/, bench/, cli/ (docs/architecture.md); no wing imports a
higher one (tests/test_layering.py).

The embedding API is importable from here (`from pipeline import Rollout, SamplingSpec`):
the names in `__all__` load on first use (PEP 562 `__getattr__`), so `import pipeline`
stays cheap and imports neither torch nor any wing; the imports under `TYPE_CHECKING` only
give type checkers the same names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.extras import MissingExtraError
    from pipeline.config import (
        ActorGroup,
        ConfigError,
        PipelineConfig,
        Topology,
        TransportConfig,
        load_config,
        save_config,
    )
    from pipeline.rollout import (
        GeneratorsLost,
        Group,
        InvalidPromptError,
        InvalidSamplingError,
        OffPolicyError,
        Rollout,
        RolloutError,
        RolloutInputError,
        RolloutResult,
        SchedulerLost,
        WeightsError,
        WeightsRefused,
        Workload,
        WorkloadPrompt,
        compute_metrics,
        load_trace,
        make_workload,
        plot_timeline,
        rollout_config,
        save_metrics,
        save_trace,
    )
    from pipeline.tasks import Task, TaskPrompt, get_task, register_task
    from transport.messages import (
        ChunkRecord,
        InstanceCounters,
        PromptSpec,
        RequestRecord,
        RolloutRecord,
        SampleResult,
        SamplingSpec,
        SpecStats,
    )

# the module each public name comes from (the TYPE_CHECKING block above lists the same)
_SOURCES: dict[str, tuple[str, ...]] = {
    "actors.extras": ("MissingExtraError",),
    "pipeline.config": (
        "ActorGroup", "ConfigError", "PipelineConfig", "Topology", "TransportConfig",
        "load_config", "save_config",
    ),
    "pipeline.rollout": (
        "GeneratorsLost", "Group", "InvalidPromptError", "InvalidSamplingError",
        "OffPolicyError", "Rollout", "RolloutError", "RolloutInputError", "RolloutResult",
        "SchedulerLost", "WeightsError", "WeightsRefused", "Workload", "WorkloadPrompt",
        "compute_metrics", "load_trace", "make_workload", "plot_timeline", "rollout_config",
        "save_metrics", "save_trace",
    ),
    "pipeline.tasks": ("Task", "TaskPrompt", "get_task", "register_task"),
    "transport.messages": (
        "ChunkRecord", "InstanceCounters", "PromptSpec", "RequestRecord", "RolloutRecord",
        "SampleResult", "SamplingSpec", "SpecStats",
    ),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [
    "ActorGroup",
    "ChunkRecord",
    "ConfigError",
    "GeneratorsLost",
    "Group",
    "InstanceCounters",
    "InvalidPromptError",
    "InvalidSamplingError",
    "MissingExtraError",
    "OffPolicyError",
    "PipelineConfig",
    "PromptSpec",
    "RequestRecord",
    "Rollout",
    "RolloutError",
    "RolloutInputError",
    "RolloutRecord",
    "RolloutResult",
    "SampleResult",
    "SamplingSpec",
    "SchedulerLost",
    "SpecStats",
    "Task",
    "TaskPrompt",
    "Topology",
    "TransportConfig",
    "WeightsError",
    "WeightsRefused",
    "Workload",
    "WorkloadPrompt",
    "compute_metrics",
    "get_task",
    "load_config",
    "load_trace",
    "make_workload",
    "plot_timeline",
    "register_task",
    "rollout_config",
    "save_config",
    "save_metrics",
    "save_trace",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
