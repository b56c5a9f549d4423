"""The environment actor: multi-turn episodes' environments, a pool scaled like the
generators (docs/multiturn.md)."""

from actors.environment.agent import (
    AgentEnvironment,
    AgentError,
    AgentFunction,
    AgentTurns,
    agent_environment,
)
from actors.environment.api import (
    Environment,
    EnvironmentFactory,
    EnvironmentLoadError,
    Observation,
    StepResult,
    load_factory,
)
from actors.environment.core import BadObservation, cut, observation_ids
from actors.environment.options import EnvironmentOptions

__all__ = [
    "AgentEnvironment",
    "AgentError",
    "AgentFunction",
    "AgentTurns",
    "BadObservation",
    "Environment",
    "EnvironmentFactory",
    "EnvironmentLoadError",
    "EnvironmentOptions",
    "Observation",
    "StepResult",
    "agent_environment",
    "cut",
    "load_factory",
    "observation_ids",
]
