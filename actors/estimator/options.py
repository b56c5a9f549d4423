"""EstimatorOptions: the length estimator's settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class EstimatorOptions:
    """`use_prior`: (beyond Seer) a group with nothing finished starts at the longest
    output its prompt produced last time, instead of at the generation limit."""

    use_prior: bool = False
