"""DraftSource: the calls a generator's `Speculator` makes to find drafts for its requests.

One protocol, implemented by the live `DraftClient` (local replicas of the draft-tree
store's trees, `actors.drafts.client`) and by the simulator's `ReplayClient` (trees of
recorded output, `pipeline.sim.replay`). The speculator drives it chunk by chunk:
`start` when a chunk begins on this generator, `extend` with each step's new tokens,
`speculate` before a step, `end` when the chunk ends here, `forget` when the rollout ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from actors.drafts.suffix_tree_api import SpecResult


class DraftSource(Protocol):
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
        """A chunk of `request_id` (chunk number `chunk_seq` of group `group_id`) begins here
        from `prompt_ids` and the `generated_ids` it has so far, of which the last `fresh`
        are a multi-turn episode's observation tokens no chunk generated; True when its group
        is new to this source (worth pulling the store's tokens for it at once)."""
        ...

    def extend(self, request_id: str, tokens: Sequence[int]) -> None:
        """The request generated these tokens (after an engine step)."""
        ...

    def speculate(
        self, request_id: str, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult | None:
        """Draft at most `max_tokens` nodes after the request's last token (None: nothing
        to draft from, or the request is not running here)."""
        ...

    def end(self, request_id: str) -> None:
        """The request's chunk ended here."""
        ...

    def forget(self, request_ids: Sequence[str]) -> None:
        """A rollout ended: drop what is held for these requests' groups."""
        ...
