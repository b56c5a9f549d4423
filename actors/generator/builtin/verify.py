"""Lossless acceptance of a draft tree from one verify forward.

Every segment index (the root, i.e. the request's last real token, and each draft node) has
logits for the token that follows it. ``choose_tokens`` draws at each index the token plain
decoding would draw at that position, with the coin of that absolute position (greedy: the
argmax). The walk starts at the root: it emits the chosen token; if that token is a child of
the current node the child is accepted and the walk descends, else the walk stops. At a leaf
the chosen token is the bonus token.

Why this is exactly the procedure of REFERENCES.md ("one uniform per node, walk the distinct
children's intervals, on rejection sample from p with the children zeroed"): at a node with
distribution p and coin u, the inverse-CDF draw lands in child c's interval with probability
p(c), which accepts c; otherwise u is uniform over the other tokens' intervals, so the emitted
token is a draw from p with every child zeroed and renormalised. The children's intervals sit
where the vocabulary order puts them instead of side by side: the same law, and a coupling
with plain decoding, so drafts never change a seeded request's tokens (up to float
near-ties between batch shapes). Coins depend on (seed, position) only, never on the draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from actors.generator.builtin.draft_tree import DraftTree


def accept(
    tree: DraftTree | None,
    choices: Sequence[int],
    logprobs: Sequence[float],
    offset: int,
) -> tuple[list[int], list[float], list[int]]:
    """Walk one row whose segment starts at flat index ``offset``.

    Returns the emitted tokens, their logprobs, and the accepted path as segment indices
    (the root first; ``len(path) == len(tokens)``: the last emitted token has no KV yet).
    """
    cur = 0
    tokens: list[int] = []
    lps: list[float] = []
    path = [0]
    while True:
        tok = choices[offset + cur]
        tokens.append(tok)
        lps.append(logprobs[offset + cur])
        nxt = tree.children[cur].get(tok) if tree is not None else None
        if nxt is None:
            return tokens, lps, path
        path.append(nxt)
        cur = nxt
