"""DispatcherOptions: where the dispatcher sends and how long it waits."""

from __future__ import annotations

from dataclasses import dataclass

from actors.options import check, check_positive


@dataclass(frozen=True, kw_only=True)
class DispatcherOptions:
    """`role`: the actors that train (rank r is the actor of that role with index r).
    `send_timeout_s`: one sample, or one rank's end message, to one rank (the scheduler's
    stream uses ten times its `health_timeout_s`). `train_timeout_s`: every rank's step, from
    its layout to its report."""

    role: str = "trainer"
    send_timeout_s: float = 30.0
    train_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check(bool(self.role), "DispatcherOptions.role", "an actor role", self.role)
        check_positive(self, "send_timeout_s", "train_timeout_s")
