"""The environment actor: multi-turn episodes' environments, a pool scaled like the
generators (docs/multiturn.md)."""

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
    "BadObservation",
    "Environment",
    "EnvironmentFactory",
    "EnvironmentLoadError",
    "EnvironmentOptions",
    "Observation",
    "StepResult",
    "cut",
    "load_factory",
    "observation_ids",
]
