"""Suffix tree over many token sequences, for speculative drafts (SuffixDecoding semantics).

One tree per GRPO group holds all sibling responses' tokens; each request reads drafts from
it through its own incremental ``Matcher``.

Semantics (the compiled core and the pure-Python reference agree exactly):

- The tree stores, for every sequence s and start i, the substring ``s[i : i + max_depth]``.
  ``count(p)`` (1 <= len(p) <= max_depth) is the number of (sequence, position) pairs where
  p occurs; ``continuations(p)`` maps each token t to ``count(p + [t])`` ({} when
  len(p) >= max_depth or p is absent; ``()`` gives unigram counts).
- ``match_len(context, max_match)``: the longest L, 1 <= L <= min(max_match, len(context)),
  whose pattern ``context[-L:]`` has a continuation (an occurrence only at a sequence's very
  end does not count); 0 if none.
- Drafts from the matched pattern p: a child token t has conditional probability
  count(p + t) / count(p); a node's prob is the product along its path. Best-first: a heap
  of candidates (higher prob, then higher count, then smaller token, then smaller parent
  index first), starting with p's children; pop the best; stop when its prob < min_prob or
  the draft has max_tokens nodes. A candidate is added when its parent (the matched pattern
  for top-level nodes) has no child in the draft yet, or when the draft has fewer than
  ``top_k_paths`` paths (leaves), a further child opening a new path; otherwise it is
  skipped. Added nodes push their children. ``top_k_paths=1`` is the greedy chain.
- ``Matcher.feed(k tokens)`` tries lengths c = min(m + k + slack, max_match, fed) down to 1
  (m: the previous match), so on an unchanged tree it equals the full ``match_len``; on a
  growing tree it is a lower bound that catches up by ``slack`` per feed.

``SuffixTree`` is the compiled implementation when ``actors.drafts._suffix_tree`` imports,
else the pure-Python one (with a ``suffix_tree_fallback`` warning); both subclass
``SuffixTreeBase``, and type checkers see ``SuffixTree`` as that base.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import structlog

from actors.drafts.suffix_tree_py import (
    Matcher,
    PyMatcher,
    PySuffixTree,
    SpecResult,
    SuffixTreeBase,
)

if TYPE_CHECKING:
    from actors.drafts import _suffix_tree as _st

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

_core: Any
try:
    from actors.drafts import _suffix_tree as _core
except ImportError as exc:  # pragma: no cover - depends on the build
    _core = None
    structlog.get_logger().warning(
        "suffix_tree_fallback",
        reason=str(exc),
        hint="the compiled suffix tree did not import; using the pure-Python one "
        "(rebuild with `pip install -e .`)",
    )

HAVE_COMPILED_CORE: bool = _core is not None


class CompiledMatcher(Matcher):
    """Matcher of a compiled tree (a thin wrapper of the core's)."""

    __slots__ = ("_m",)

    def __init__(self, core_matcher: _st.Matcher) -> None:
        self._m = core_matcher

    def feed(self, token_ids: Sequence[int]) -> None:
        self._m.feed(token_ids)

    @property
    def match_len(self) -> int:
        return self._m.match_len

    def speculate(
        self, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult:
        return SpecResult(*self._m.speculate(max_tokens, top_k_paths, min_prob))

    def reset(self) -> None:
        self._m.reset()


class CompiledSuffixTree(SuffixTreeBase):
    """The compiled suffix tree (path-compressed; a thin wrapper of the core's)."""

    __slots__ = ("_t",)

    def __init__(self, max_depth: int = 64) -> None:
        if _core is None:
            raise RuntimeError("the compiled suffix tree is not built")
        self._t: _st.SuffixTree = _core.SuffixTree(max_depth)

    @property
    def max_depth(self) -> int:
        return self._t.max_depth

    @property
    def num_sequences(self) -> int:
        return self._t.num_sequences

    @property
    def num_tokens(self) -> int:
        return self._t.num_tokens

    @property
    def num_nodes(self) -> int:
        return self._t.num_nodes

    def append(self, seq_id: int, token_ids: Sequence[int]) -> None:
        self._t.append(seq_id, token_ids)

    def remove(self, seq_id: int) -> None:
        self._t.remove(seq_id)

    def has_sequence(self, seq_id: int) -> bool:
        return self._t.has_sequence(seq_id)

    def seq_len(self, seq_id: int) -> int:
        return self._t.seq_len(seq_id)

    def seq_ids(self) -> list[int]:
        return self._t.seq_ids()

    def tokens(self, seq_id: int) -> list[int]:
        return self._t.tokens(seq_id)

    def count(self, pattern: Sequence[int]) -> int:
        return self._t.count(pattern)

    def continuations(self, pattern: Sequence[int]) -> dict[int, int]:
        return self._t.continuations(pattern)

    def match_len(self, context: Sequence[int], max_match: int) -> int:
        return self._t.match_len(context, max_match)

    def speculate(
        self,
        context: Sequence[int],
        *,
        max_tokens: int,
        top_k_paths: int = 1,
        min_prob: float = 0.1,
        max_match: int = 32,
    ) -> SpecResult:
        return SpecResult(*self._t.speculate(context, max_tokens, top_k_paths, min_prob, max_match))

    def matcher(self, max_match: int = 32, slack: int = 8) -> Matcher:
        return CompiledMatcher(self._t.matcher(max_match, slack))


CSuffixTree: type[CompiledSuffixTree] | None = CompiledSuffixTree if HAVE_COMPILED_CORE else None

if TYPE_CHECKING:
    SuffixTree = SuffixTreeBase
else:
    SuffixTree = CompiledSuffixTree if HAVE_COMPILED_CORE else PySuffixTree
