"""``SuffixTree``: the suffix tree class to instantiate, chosen once at import.

The compiled core (``actors.drafts._suffix_tree``, used directly) when it imports, else the
pure-Python twin ``PySuffixTree`` with a ``suffix_tree_fallback`` warning (the wheel builds
the compiled core only where a C++ compiler is; setup.py). ``SUFFIX_TREE_IMPL`` names the
one in use ("compiled" or "python"); the draft store logs it as it starts. Both satisfy
``SuffixTreeLike``; the interface and its semantics are in ``actors.drafts.suffix_tree_api``
(annotate with ``SuffixTreeLike`` / ``MatcherLike``, not with ``SuffixTree``).
"""

from __future__ import annotations

import structlog

from actors.drafts.suffix_tree_api import MatcherLike, SpecResult, SuffixTreeLike
from actors.drafts.suffix_tree_py import PyMatcher, PySuffixTree

__all__ = [
    "HAVE_COMPILED_CORE",
    "SUFFIX_TREE_IMPL",
    "MatcherLike",
    "PyMatcher",
    "PySuffixTree",
    "SpecResult",
    "SuffixTree",
    "SuffixTreeLike",
]

SuffixTree: type[SuffixTreeLike]
try:
    from actors.drafts._suffix_tree import SuffixTree as _CompiledSuffixTree
except ImportError as exc:  # pragma: no cover - depends on the build
    structlog.get_logger().warning(
        "suffix_tree_fallback",
        reason=str(exc),
        hint="the compiled suffix tree did not import (seer-rl was installed without a C++ "
        "compiler, or pybind11); using the pure-Python one, slower at drafting: reinstall "
        "seer-rl with a C++17 compiler present",
    )
    SuffixTree = PySuffixTree
else:
    SuffixTree = _CompiledSuffixTree

HAVE_COMPILED_CORE: bool = SuffixTree is not PySuffixTree
SUFFIX_TREE_IMPL: str = "compiled" if HAVE_COMPILED_CORE else "python"
