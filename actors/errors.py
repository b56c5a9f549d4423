"""Errors that cross actor packages: raised on one side, caught on another.

`OffPolicyError` is raised by the trainer and by the rollout API (`pipeline.rollout`), which
must not import the trainer; `DispatchError` and `RankLost` by the dispatcher's sending side
(`actors.dispatcher`) and by the trainer rank's receiving side (`actors.trainer.shard`).
"""

from __future__ import annotations


class OffPolicyError(ValueError):
    """A sample (or the trainer) is not on the weight version the step was asked to train."""


class DispatchError(RuntimeError):
    """A sample could not reach its rank, or a rank's shard does not match its layout."""


class RankLost(DispatchError):
    """Trainer rank `rank` died or went silent during an iteration's dispatch or step."""

    def __init__(self, rank: int, reason: str) -> None:
        super().__init__(f"trainer rank {rank} lost: {reason}")
        self.rank = rank
        self.reason = reason
