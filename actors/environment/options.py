"""EnvironmentOptions: the environment actor's concurrency and time limits."""

from __future__ import annotations

from dataclasses import dataclass

from actors.options import check_positive


@dataclass(frozen=True, kw_only=True)
class EnvironmentOptions:
    """Limits of one environment actor (a pool of them scales like the generators)."""

    #: resets and steps running at once in this actor; more wait their turn
    max_concurrency: int = 64
    #: seconds a reset or step may take; one that takes longer ends its episode
    #: ("env_timeout", scored 0) and its environment is closed
    step_timeout_s: float = 30.0
    #: seconds an environment's `close()` may take before it is given up on
    close_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        check_positive(self, "max_concurrency", "step_timeout_s", "close_timeout_s")
