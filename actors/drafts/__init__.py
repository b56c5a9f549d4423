"""Grouped speculative decoding: the suffix tree, the draft-tree store's core, the
generator's replicas and the speculation policy (the `Speculator` that glues them to an
engine is in `actors.generator.speculator`; the store actor in `actors.drafts.actor`)."""

from actors.drafts.client import DraftClient, GroupReplica
from actors.drafts.options import DraftStoreOptions, SpecConfig
from actors.drafts.policy import (
    AcceptanceStats,
    Calibration,
    FixedPolicy,
    MarginalBenefitPolicy,
    make_draft_policy,
)
from actors.drafts.source import DraftSource
from actors.drafts.store import DraftStore
from actors.drafts.suffix_tree import (
    HAVE_COMPILED_CORE,
    SUFFIX_TREE_IMPL,
    MatcherLike,
    PyMatcher,
    PySuffixTree,
    SpecResult,
    SuffixTree,
    SuffixTreeLike,
)

__all__ = [
    "HAVE_COMPILED_CORE",
    "SUFFIX_TREE_IMPL",
    "AcceptanceStats",
    "Calibration",
    "DraftClient",
    "DraftSource",
    "DraftStore",
    "DraftStoreOptions",
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
    "make_draft_policy",
]
