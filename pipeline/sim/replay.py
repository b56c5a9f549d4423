"""Grouped drafts replayed on recorded output, step by step, by the live generator's code.

When every simulated request carries its recorded output (``SimRequest.token_ids``: a live
trace's tokens), each simulated instance runs the live generator's ``Speculator``
(``actors.generator.speculator``), unmodified: its MBA policy and calibration, the
back-off while drafts do not pay, exploration, multi-path drafts in small batches. Only
its draft client is replaced: ``ReplayClient`` drafts from one real suffix tree per group
(the project's compiled tree, the live tree depth and match length) holding each member's
recorded tokens as far as the simulation has generated them, so what a draft can find
depends on which siblings are ahead, and by how much, at that moment. A granted draft is
checked against the request's own recorded continuation: the tokens it emits that step
are the accepted path plus the bonus token, as the engine's verification would give
(lossless: the output does not depend on the drafts). The outcome goes back to the
policy (``Speculator.observe``), as live.

As live, each sibling's sequence in the tree starts with the group's prompt tail (its
last ``PROMPT_TAIL_TOKENS`` tokens, ``SimRequest.prompt_tail``), and a request's matcher
starts from the prompt tail and what it has generated, so a request that has generated
nothing yet can draft its siblings' first tokens.

Stated difference from live: every sibling's tokens reach the tree as soon as the
simulation generates them (live, siblings on another generator arrive with the draft
store's sync, every ``sync_interval_s``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from actors.drafts.options import SpecConfig
from actors.drafts.source import DraftSource
from actors.drafts.suffix_tree import MatcherLike, SpecResult, SuffixTree, SuffixTreeLike
from actors.generator.engine import Draft

__all__ = ["ReplayClient", "ReplayTrees", "accepted_len"]


class ReplayTrees:
    """One suffix tree per group with each member's recorded tokens up to where the
    simulation has generated them (``generated``: request index -> tokens so far), after
    its prompt tail (``prompt_tails``, per request; none: no tail)."""

    def __init__(
        self,
        tokens: Sequence[Sequence[int]],
        groups: dict[str, list[int]],
        generated: Callable[[int], int],
        config: SpecConfig,
        prompt_tails: Sequence[Sequence[int]] = (),
    ) -> None:
        self.tokens = tokens
        self.prompt_tails = prompt_tails
        self.groups = groups
        self.generated = generated
        self.config = config
        self.trees: dict[str, SuffixTreeLike] = {}
        self.fed = [0] * len(tokens)
        self._step = 0  # the simulation's step count (``begin_step``)
        self._synced: dict[str, int] = {}  # group -> the step it was last synced at

    def begin_step(self) -> None:
        """The simulation moved on: the next ``sync`` of each group reads its progress."""
        self._step += 1

    def sync(self, group_id: str) -> SuffixTreeLike:
        tree = self.trees.get(group_id)
        if tree is None:
            tree = self.trees[group_id] = SuffixTree(self.config.tree_depth)
        if self._synced.get(group_id) == self._step:
            return tree
        self._synced[group_id] = self._step
        for s in self.groups[group_id]:
            n = self.generated(s)
            if n > self.fed[s]:
                new = list(self.tokens[s][self.fed[s] : n])
                if not self.fed[s] and self.prompt_tails:  # a sequence starts with the tail
                    new = [*self.prompt_tails[s], *new]
                tree.append(s, new)
                self.fed[s] = n
        return tree


class ReplayClient(DraftSource):
    """The ``DraftSource`` a ``Speculator`` drafts from, answered from ``ReplayTrees``."""

    def __init__(self, trees: ReplayTrees, index: dict[str, int]) -> None:
        self.trees = trees
        self.index = index
        self._group: dict[str, str] = {}
        self._matchers: dict[str, tuple[MatcherLike, int]] = {}  # request -> (matcher, fed)

    def start(
        self,
        request_id: str,
        group_id: str,
        chunk_seq: int,
        prompt_ids: Sequence[int],
        generated_ids: Sequence[int],
        *,
        fresh: int = 0,
    ) -> bool:
        tree = self.trees.sync(group_id)
        max_match = self.trees.config.max_match
        matcher = tree.matcher(max_match, 8)
        matcher.feed([*prompt_ids[-max_match:], *generated_ids][-max_match:])  # as live
        self._group[request_id] = group_id
        self._matchers[request_id] = (matcher, len(generated_ids))
        return False

    def speculate(
        self, request_id: str, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult | None:
        held = self._matchers.get(request_id)
        if held is None or max_tokens <= 0:
            return None
        self.trees.sync(self._group[request_id])
        matcher, fed = held
        r = self.index[request_id]
        n = self.trees.generated(r)
        if n > fed:
            matcher.feed(list(self.trees.tokens[r][fed:n]))
            self._matchers[request_id] = (matcher, n)
        return matcher.speculate(max_tokens=max_tokens, top_k_paths=top_k_paths, min_prob=min_prob)

    def extend(self, request_id: str, tokens: Sequence[int]) -> None:
        """Nothing to do: the trees follow the simulation's progress (``ReplayTrees.sync``)."""

    def end(self, request_id: str) -> None:
        self._matchers.pop(request_id, None)
        self._group.pop(request_id, None)

    def forget(self, request_ids: Sequence[str]) -> None:
        """Nothing to do: a simulation is one rollout."""


def accepted_len(draft: Draft, continuation: Sequence[int]) -> int:
    """How many of ``draft``'s tokens the engine's verification accepts when the request's
    true next tokens are ``continuation``: the longest root path of the draft tree that
    spells its prefix."""
    children: dict[int, dict[int, int]] = {}
    for i, (tok, parent) in enumerate(zip(draft.token_ids, draft.parents, strict=True)):
        children.setdefault(parent, {})[tok] = i
    node, n = -1, 0
    while n < len(continuation):
        nxt = children.get(node, {}).get(continuation[n])
        if nxt is None:
            break
        node, n = nxt, n + 1
    return n
