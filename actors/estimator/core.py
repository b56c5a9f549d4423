"""LengthEstimator: per-group output-length estimates.

Pure core (an async actor shell lives elsewhere). Consumes: ``open_group`` when a prompt
becomes a group, ``on_request_finished`` with each finished sample's output length,
``close_group`` at the end of the group's rollout. Emits: ``on_request_finished`` returns
the group's new estimate when it changed (the shell forwards it to the scheduler as
``EstimateUpdated``).

Estimate (Seer): the longest finished sibling; with none finished, the generation limit --
or, with ``use_prior`` (beyond Seer), the longest output this prompt id produced the last
time one of its groups closed, capped at the limit. ``prior_rule`` says how long the prior
counts: "floor" (the default) keeps it as a lower bound, so the estimate is the larger of
the prior and the longest finished sibling (a short first sibling does not pull a group
known to be long down: `seer sim seer --epochs` measured this ahead); "until_finished"
drops it when the first sibling finishes. Unknown group ids raise ``UnknownGroupError``.
Priors are kept per prompt id for the estimator's lifetime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["PRIOR_RULES", "LengthEstimator", "PriorRule", "UnknownGroupError"]

PriorRule = Literal["floor", "until_finished"]
PRIOR_RULES: tuple[PriorRule, ...] = ("floor", "until_finished")


class UnknownGroupError(KeyError):
    """A group id that was never opened (or was already closed)."""

    def __init__(self, group_id: str) -> None:
        super().__init__(group_id)
        self.group_id = group_id

    def __str__(self) -> str:
        return f"unknown group id {self.group_id!r}: never opened, or already closed"


@dataclass(slots=True)
class _Group:
    prompt_id: str
    group_size: int
    num_finished: int = 0
    longest: int | None = None  # longest finished sibling's output length


class LengthEstimator:
    def __init__(
        self, generation_limit: int, *, use_prior: bool = False, prior_rule: PriorRule = "floor"
    ) -> None:
        if generation_limit < 1:
            raise ValueError(f"generation_limit must be >= 1, got {generation_limit}")
        if prior_rule not in PRIOR_RULES:
            raise ValueError(f"prior_rule must be one of {PRIOR_RULES}, got {prior_rule!r}")
        self.generation_limit = generation_limit
        self.use_prior = use_prior
        self.prior_rule = prior_rule
        self._groups: dict[str, _Group] = {}
        self._priors: dict[str, int] = {}  # prompt id -> max output when its group last closed

    def open_group(self, group_id: str, prompt_id: str, group_size: int) -> None:
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already open")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self._groups[group_id] = _Group(prompt_id, group_size)

    def on_request_finished(self, group_id: str, output_len: int) -> int | None:
        """Record a finished sibling; the new estimate if it changed, else None."""
        group = self._group(group_id)
        if output_len < 0:
            raise ValueError(f"output_len must be >= 0, got {output_len}")
        if group.num_finished >= group.group_size:
            raise ValueError(f"group {group_id!r} has only {group.group_size} requests")
        before = self.estimate(group_id)
        group.num_finished += 1
        group.longest = output_len if group.longest is None else max(group.longest, output_len)
        after = self.estimate(group_id)
        return after if after != before else None

    def estimate(self, group_id: str) -> int:
        group = self._group(group_id)
        prior = self._priors.get(group.prompt_id) if self.use_prior else None
        if group.longest is not None:
            if prior is not None and self.prior_rule == "floor":
                return min(max(group.longest, prior), self.generation_limit)
            return group.longest
        if prior is not None:
            return min(prior, self.generation_limit)
        return self.generation_limit

    def close_group(self, group_id: str) -> None:
        """Forget the group; remember its longest output as its prompt's prior."""
        group = self._group(group_id)
        del self._groups[group_id]
        if group.longest is not None:
            self._priors[group.prompt_id] = group.longest

    def prior(self, prompt_id: str) -> int | None:
        """The prompt's longest output when its group last closed, if any."""
        return self._priors.get(prompt_id)

    @property
    def num_open_groups(self) -> int:
        return len(self._groups)

    def _group(self, group_id: str) -> _Group:
        try:
            return self._groups[group_id]
        except KeyError:
            raise UnknownGroupError(group_id) from None
