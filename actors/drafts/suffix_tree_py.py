"""Pure-Python suffix tree (an uncompressed, depth-limited trie): the reference and fallback.

Same interface (``SuffixTreeLike`` / ``MatcherLike``) and results as the compiled core
(``actors.drafts._suffix_tree``); the semantics are in ``actors.drafts.suffix_tree_api``.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Sequence

from actors.drafts.suffix_tree_api import SpecResult

_TOKEN_LIMIT = 2**31


def as_tokens(token_ids: Sequence[int]) -> list[int]:
    """Token ids as a list of ints in [0, 2**31); ValueError otherwise."""
    out = [t if type(t) is int else operator.index(t) for t in token_ids]
    for t in out:
        if not 0 <= t < _TOKEN_LIMIT:
            raise ValueError(f"token ids must be in [0, 2**31), got {t}")
    return out


def check_draft_args(max_tokens: int, top_k_paths: int, min_prob: float) -> None:
    if max_tokens < 0:
        raise ValueError("max_tokens must be >= 0")
    if top_k_paths < 1:
        raise ValueError("top_k_paths must be >= 1")
    if not 0.0 <= min_prob <= 1.0:
        raise ValueError("min_prob must be in [0, 1]")


def make_result(
    tokens: list[int], parents: list[int], probs: list[float], match_len: int
) -> SpecResult:
    score = 0.0
    for p in probs:  # left to right, like the compiled core (not math.fsum / sum)
        score += p
    return SpecResult(tuple(tokens), tuple(parents), tuple(probs), score, match_len)


class _Node:
    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.count = 0
        self.children: dict[int, _Node] = {}


class _Seq:
    __slots__ = ("active", "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        # Nodes where the last min(len, max_depth - 1) suffixes end, longest first.
        self.active: list[_Node] = []


class PySuffixTree:
    """Depth-limited trie of all suffixes of many sequences, with per-node counts."""

    __slots__ = ("_max_depth", "_num_nodes", "_num_tokens", "_root", "_seqs")

    def __init__(self, max_depth: int = 64) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be >= 1")
        self._max_depth = max_depth
        self._root = _Node()
        self._seqs: dict[int, _Seq] = {}
        self._num_tokens = 0
        self._num_nodes = 0

    @property
    def max_depth(self) -> int:
        return self._max_depth

    @property
    def num_sequences(self) -> int:
        return len(self._seqs)

    @property
    def num_tokens(self) -> int:
        return self._num_tokens

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    def append(self, seq_id: int, token_ids: Sequence[int]) -> None:
        toks = as_tokens(token_ids)
        seq = self._seqs.get(seq_id)
        if seq is None:
            seq = self._seqs[seq_id] = _Seq()
        depth = self._max_depth
        for t in toks:
            nodes = seq.active
            nodes.append(self._root)
            stepped: list[_Node] = []
            for node in nodes:
                child = node.children.get(t)
                if child is None:
                    child = node.children[t] = _Node()
                    self._num_nodes += 1
                child.count += 1
                stepped.append(child)
            if len(stepped) >= depth:  # the longest suffix reached max_depth
                del stepped[0]
            seq.active = stepped
        seq.tokens.extend(toks)
        self._num_tokens += len(toks)

    def remove(self, seq_id: int) -> None:
        seq = self._seqs.pop(seq_id)  # KeyError for an unknown id
        toks = seq.tokens
        depth = self._max_depth
        for i in range(len(toks)):
            node = self._root
            for t in toks[i : i + depth]:
                child = node.children[t]
                child.count -= 1
                if child.count == 0:  # the last occurrence: drop the whole subtree
                    del node.children[t]
                    self._num_nodes -= _subtree_size(child)
                    break
                node = child
        self._num_tokens -= len(toks)

    def has_sequence(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def seq_len(self, seq_id: int) -> int:
        return len(self._seqs[seq_id].tokens)

    def seq_ids(self) -> list[int]:
        return list(self._seqs)

    def tokens(self, seq_id: int) -> list[int]:
        return list(self._seqs[seq_id].tokens)

    def _find(self, pattern: Sequence[int]) -> _Node | None:
        node = self._root
        for t in pattern:
            nxt = node.children.get(t)
            if nxt is None:
                return None
            node = nxt
        return node

    def count(self, pattern: Sequence[int]) -> int:
        p = as_tokens(pattern)
        if not 1 <= len(p) <= self._max_depth:
            raise ValueError("pattern length must be in [1, max_depth]")
        node = self._find(p)
        return 0 if node is None else node.count

    def continuations(self, pattern: Sequence[int]) -> dict[int, int]:
        p = as_tokens(pattern)
        if len(p) >= self._max_depth:
            return {}
        node = self._find(p)
        if node is None:
            return {}
        return {t: c.count for t, c in sorted(node.children.items())}

    def _match(self, ctx: list[int], upper: int) -> tuple[int, _Node | None]:
        """Longest L <= upper whose pattern ctx[-L:] has a continuation, and its node."""
        upper = min(upper, len(ctx), self._max_depth - 1)
        n = len(ctx)
        for length in range(upper, 0, -1):
            node = self._find(ctx[n - length :])
            if node is not None and node.children:
                return length, node
        return 0, None

    def match_len(self, context: Sequence[int], max_match: int) -> int:
        if max_match < 0:
            raise ValueError("max_match must be >= 0")
        return self._match(as_tokens(context), max_match)[0]

    def speculate(
        self,
        context: Sequence[int],
        *,
        max_tokens: int,
        top_k_paths: int = 1,
        min_prob: float = 0.1,
        max_match: int = 32,
    ) -> SpecResult:
        check_draft_args(max_tokens, top_k_paths, min_prob)
        if max_match < 0:
            raise ValueError("max_match must be >= 0")
        length, node = self._match(as_tokens(context), max_match)
        return _draft(node, length, max_tokens, top_k_paths, min_prob)

    def matcher(self, max_match: int = 32, slack: int = 8) -> PyMatcher:
        return PyMatcher(self, max_match, slack)


class PyMatcher:
    """One request's incremental match against a ``PySuffixTree`` (see ``MatcherLike``)."""

    __slots__ = ("_buf", "_m", "_max_match", "_slack", "_total", "_tree")

    def __init__(self, tree: PySuffixTree, max_match: int = 32, slack: int = 8) -> None:
        if max_match < 0:
            raise ValueError("max_match must be >= 0")
        if slack < 0:
            raise ValueError("slack must be >= 0")
        self._tree = tree
        self._max_match = max_match
        self._slack = slack
        self._buf: list[int] = []
        self._total = 0
        self._m = 0

    def feed(self, token_ids: Sequence[int]) -> None:
        toks = as_tokens(token_ids)
        self._buf.extend(toks)
        if len(self._buf) > self._max_match:
            del self._buf[: len(self._buf) - self._max_match]
        self._total += len(toks)
        upper = min(self._m + len(toks) + self._slack, self._max_match, self._total)
        self._m = self._tree._match(self._buf, upper)[0]

    @property
    def match_len(self) -> int:
        return self._m

    def speculate(
        self, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult:
        check_draft_args(max_tokens, top_k_paths, min_prob)
        # Re-validate m against the current tree (sequences may have been removed).
        self._m, node = self._tree._match(self._buf, self._m)
        return _draft(node, self._m, max_tokens, top_k_paths, min_prob)

    def reset(self) -> None:
        self._buf.clear()
        self._total = 0
        self._m = 0


def _subtree_size(node: _Node) -> int:
    size, stack = 0, [node]
    while stack:
        n = stack.pop()
        size += 1
        stack.extend(n.children.values())
    return size


def _draft(
    node: _Node | None, match_len: int, max_tokens: int, top_k: int, min_prob: float
) -> SpecResult:
    """Best-first draft below ``node`` (the matched pattern); see suffix_tree_api.py for rules."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    if node is None or max_tokens == 0:
        return make_result(tokens, parents, probs, match_len)
    # Heap key: higher probability, higher count, smaller token, smaller parent index.
    heap: list[tuple[float, int, int, int, _Node]] = []

    def push_children(nd: _Node, base: float, parent: int) -> None:
        pc = nd.count
        for tok, child in nd.children.items():
            cum = base * (child.count / pc)
            if cum >= min_prob:
                heapq.heappush(heap, (-cum, -child.count, tok, parent, child))

    push_children(node, 1.0, -1)
    has_child: list[bool] = []
    root_has_child = False
    leaves = 0
    while heap and len(tokens) < max_tokens:
        neg_prob, _, tok, parent, child = heapq.heappop(heap)
        parent_has_child = root_has_child if parent < 0 else has_child[parent]
        if parent_has_child:
            if leaves >= top_k:
                continue
            leaves += 1  # a second child opens a new path
        elif parent < 0:
            leaves += 1  # the first node
        if parent < 0:
            root_has_child = True
        else:
            has_child[parent] = True
        idx = len(tokens)
        tokens.append(tok)
        parents.append(parent)
        probs.append(-neg_prob)
        has_child.append(False)
        push_children(child, -neg_prob, idx)
    return make_result(tokens, parents, probs, match_len)
