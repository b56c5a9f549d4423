"""Draft sources for speculative decoding."""

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
    "CSuffixTree",
    "CompiledMatcher",
    "CompiledSuffixTree",
    "Matcher",
    "PyMatcher",
    "PySuffixTree",
    "SpecResult",
    "SuffixTree",
    "SuffixTreeBase",
]
