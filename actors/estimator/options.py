"""EstimatorOptions: the length estimator's settings."""

from __future__ import annotations

from dataclasses import dataclass

from actors.estimator.core import PRIOR_RULES, PriorRule


@dataclass(frozen=True, kw_only=True)
class EstimatorOptions:
    """`use_prior`: (beyond Seer) a group with nothing finished starts at the longest
    output its prompt produced last time, instead of at the generation limit.
    `prior_rule`: "floor" keeps the prior as a lower bound of the estimate after siblings
    finish; "until_finished" drops it at the first finished sibling."""

    use_prior: bool = False
    prior_rule: PriorRule = "floor"

    def __post_init__(self) -> None:
        if self.prior_rule not in PRIOR_RULES:
            raise ValueError(
                f"EstimatorOptions.prior_rule must be one of {PRIOR_RULES}, got {self.prior_rule!r}"
            )
