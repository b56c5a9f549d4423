"""DraftTree: a validated `Draft` in the form the built-in engine verifies.

Node depths, the ancestor-or-self mask that tree attention needs, and a children map for
the acceptance walk. In the verify segment of a request, index 0 is the root (its last
real token) and node ``i`` sits at ``i + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.generator.engine import Draft
from actors.generator.errors import DraftError


@dataclass(frozen=True, slots=True)
class DraftTree:
    """A validated draft in segment indexing (0 = root, node i at i + 1)."""

    token_ids: tuple[int, ...]
    depths: tuple[int, ...]  # per segment index: 0 for the root, 1 for its children, ...
    children: tuple[dict[int, int], ...]  # per segment index: token id -> child segment index
    mask: torch.Tensor  # (1 + n, 1 + n) bool, ancestor-or-self
    is_chain: bool
    parents: tuple[int, ...]

    @property
    def num_nodes(self) -> int:
        return len(self.token_ids)

    def truncated(self, num_nodes: int) -> DraftTree:
        """The first ``num_nodes`` nodes (still a valid tree: parents come first)."""
        if num_nodes >= self.num_nodes:
            return self
        keep = num_nodes + 1
        children = tuple(
            {t: c for t, c in kids.items() if c < keep} for kids in self.children[:keep]
        )
        return DraftTree(
            self.token_ids[:num_nodes],
            self.depths[:keep],
            children,
            self.mask[:keep, :keep],
            self.is_chain,
            self.parents[:num_nodes],
        )


def validate_draft(draft: Draft, vocab_size: int, max_tokens: int) -> DraftTree:
    """Check ``draft`` and build its ``DraftTree``; raises ``DraftError`` with the reason."""
    n = len(draft.token_ids)
    if len(draft.parents) != n:
        raise DraftError(f"draft has {n} tokens but {len(draft.parents)} parents")
    if n > max_tokens:
        raise DraftError(f"draft has {n} tokens, more than the engine's limit {max_tokens}")
    depths = [0]
    children: list[dict[int, int]] = [{}]
    for i, (tok, par) in enumerate(zip(draft.token_ids, draft.parents, strict=True)):
        if not 0 <= tok < vocab_size:
            raise DraftError(f"draft token {tok} at node {i} is outside [0, {vocab_size})")
        if not -1 <= par < i:
            raise DraftError(f"draft node {i} has parent {par}; parents must be in [-1, {i})")
        siblings = children[par + 1]
        if tok in siblings:
            raise DraftError(
                f"draft nodes {siblings[tok] - 1} and {i} are siblings with the same token "
                f"{tok}; sibling tokens must be distinct"
            )
        siblings[tok] = i + 1
        depths.append(depths[par + 1] + 1)
        children.append({})
    is_chain = draft.parents == tuple(range(-1, n - 1))
    mask = _ancestor_mask(draft.parents)
    return DraftTree(draft.token_ids, tuple(depths), tuple(children), mask, is_chain, draft.parents)


def _ancestor_mask(parents: Sequence[int]) -> torch.Tensor:
    """(1 + n, 1 + n) bool: segment index q may attend to k iff k is q or an ancestor."""
    size = len(parents) + 1
    mask = np.zeros((size, size), dtype=np.bool_)
    mask[:, 0] = True
    for i, par in enumerate(parents, start=1):
        mask[i] = mask[par + 1]
        mask[i, i] = True
    return torch.from_numpy(mask)
