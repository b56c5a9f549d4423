"""Grouped speculative decoding: the suffix tree, the draft-tree store's core, the
generator's replicas and the speculation policy (the `Speculator` that glues them to an
engine is in `actors.drafts.speculator`; the store actor in `actors.drafts.actor`)."""

from actors.drafts.client import DraftClient, GroupReplica
from actors.drafts.policy import (
    AcceptanceStats,
    Calibration,
    FixedPolicy,
    MarginalBenefitPolicy,
    SpecConfig,
    make_policy,
)
from actors.drafts.store import PROMPT_TAIL_TOKENS, DraftStore
from actors.drafts.suffix_tree import (
    HAVE_COMPILED_CORE,
    MatcherLike,
    PyMatcher,
    PySuffixTree,
    SpecResult,
    SuffixTree,
    SuffixTreeLike,
)

__all__ = [
    "HAVE_COMPILED_CORE",
    "PROMPT_TAIL_TOKENS",
    "AcceptanceStats",
    "Calibration",
    "DraftClient",
    "DraftStore",
    "FixedPolicy",
    "GroupReplica",
    "MarginalBenefitPolicy",
    "MatcherLike",
    "PyMatcher",
    "PySuffixTree",
    "SpecConfig",
    "SpecResult",
    "SuffixTree",
    "SuffixTreeLike",
    "make_policy",
]
