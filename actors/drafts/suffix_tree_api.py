"""The suffix tree's interface: a tree over many token sequences for speculative drafts
(SuffixDecoding semantics), written once for both implementations.

One tree per GRPO group holds all sibling responses' tokens; each request reads drafts from
it through its own incremental matcher. Two classes satisfy ``SuffixTreeLike`` /
``MatcherLike``: the compiled core (``actors.drafts._suffix_tree``, pybind11) and the
pure-Python twin (``actors.drafts.suffix_tree_py``); ``actors.drafts.suffix_tree`` picks one.
Both return the ``SpecResult`` below and accept the same arguments, with the same names.

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
- ``MatcherLike.feed(k tokens)`` tries lengths c = min(m + k + slack, max_match, fed) down
  to 1 (m: the previous match), so on an unchanged tree it equals the full ``match_len``; on
  a growing tree it is a lower bound that catches up by ``slack`` per feed.

Bad input: token ids outside [0, 2**31) and out-of-range arguments raise ValueError,
non-integer tokens TypeError; an unknown sequence id KeyError (remove, seq_len, tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["MatcherLike", "SpecResult", "SuffixTreeLike"]


@dataclass(frozen=True, slots=True)
class SpecResult:
    """A draft read from a suffix tree.

    ``token_ids`` are the draft nodes in topological order; ``parents[i]`` is the index of
    node i's parent (-1: a child of the last real token), always < i; ``probs[i]`` is node
    i's path probability (product of the conditional probabilities along its path);
    ``score`` = sum(probs), the expected number of accepted tokens; ``match_len`` is the
    length of the matched context suffix (0: no match, empty draft).
    """

    token_ids: tuple[int, ...]
    parents: tuple[int, ...]
    probs: tuple[float, ...]
    score: float
    match_len: int


class MatcherLike(Protocol):
    """Incremental match state of one request's context against one tree.

    ``feed`` the tokens the context gained; ``match_len`` is then the length of the matched
    context suffix. On a tree that did not change between feeds it equals
    ``tree.match_len(all_fed_tokens, max_match)``; when the tree grows it may lag (a lower
    bound) and catches up by ``slack`` per feed. ``speculate`` re-validates the match
    against the current tree first (sequences may have been removed).
    """

    def feed(self, token_ids: Sequence[int]) -> None: ...

    @property
    def match_len(self) -> int: ...

    def speculate(
        self, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult: ...

    def reset(self) -> None: ...


class SuffixTreeLike(Protocol):
    """Depth-limited suffix tree of many sequences (ids: any int64), with per-node counts."""

    def __init__(self, max_depth: int = 64) -> None: ...

    @property
    def max_depth(self) -> int: ...

    @property
    def num_sequences(self) -> int: ...

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_nodes(self) -> int:
        """Nodes of this implementation (the compiled tree is path-compressed: fewer)."""
        ...

    def append(self, seq_id: int, token_ids: Sequence[int]) -> None: ...

    def remove(self, seq_id: int) -> None: ...

    def has_sequence(self, seq_id: int) -> bool: ...

    def seq_len(self, seq_id: int) -> int: ...

    def seq_ids(self) -> list[int]: ...

    def tokens(self, seq_id: int) -> list[int]: ...

    def count(self, pattern: Sequence[int]) -> int: ...

    def continuations(self, pattern: Sequence[int]) -> dict[int, int]: ...

    def match_len(self, context: Sequence[int], max_match: int) -> int: ...

    def speculate(
        self,
        context: Sequence[int],
        *,
        max_tokens: int,
        top_k_paths: int = 1,
        min_prob: float = 0.1,
        max_match: int = 32,
    ) -> SpecResult: ...

    def matcher(self, max_match: int = 32, slack: int = 8) -> MatcherLike: ...
