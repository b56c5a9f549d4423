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
    CompiledMatcher,
    CompiledSuffixTree,
    CSuffixTree,
    Matcher,
    PyMatcher,
    PySuffixTree,
    SpecResult,
    SuffixTree,
    SuffixTreeBase,
)

__all__ = [
    "HAVE_COMPILED_CORE",
    "PROMPT_TAIL_TOKENS",
    "AcceptanceStats",
    "CSuffixTree",
    "Calibration",
    "CompiledMatcher",
    "CompiledSuffixTree",
    "DraftClient",
    "DraftStore",
    "FixedPolicy",
    "GroupReplica",
    "MarginalBenefitPolicy",
    "Matcher",
    "PyMatcher",
    "PySuffixTree",
    "SpecConfig",
    "SpecResult",
    "SuffixTree",
    "SuffixTreeBase",
    "make_policy",
]
