"""ModelRunner: turns rows of new tokens into one cached forward and its logits.

A ``Segment`` is one row: ``ctx_len`` tokens already in its slot, then new tokens with
explicit positions and an optional mask among them (None = causal). Rows of one call occupy
the contiguous slots ``[slot_start, slot_start + len(segments))``. The runner knows nothing
about requests, budgets or sampling. With ``packed`` weights (``actors.model.packed``), a
forward of more than one token runs its matmuls on them; a single token runs the plain
modules (memory-bound: no faster packed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from actors.generator.builtin.kv_cache import KVCache
from actors.model.layout import build_layout
from actors.model.llama import LlamaModel
from actors.model.packed import PackedWeights


@dataclass(frozen=True, slots=True)
class Segment:
    ctx_len: int
    token_ids: list[int]
    positions: list[int]
    mask: torch.Tensor | None = None  # (q, q) bool among the new tokens; None = causal


class ModelRunner:
    def __init__(
        self, model: LlamaModel, cache: KVCache, packed: PackedWeights | None = None
    ) -> None:
        self.model = model
        self.cache = cache
        self.packed = packed

    def forward(
        self,
        slot_start: int,
        segments: Sequence[Segment],
        logits_index: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Logits (N, V) for every new token, or (M, V) for the flat indices given."""
        ids: list[int] = []
        pos: list[int] = []
        for seg in segments:
            ids.extend(seg.token_ids)
            pos.extend(seg.positions)
        masks = [seg.mask for seg in segments]
        layout = build_layout(
            slot_start,
            [seg.ctx_len for seg in segments],
            [len(seg.token_ids) for seg in segments],
            masks if any(m is not None for m in masks) else None,
            device=self.cache.device,
        )
        dev = self.cache.device
        index = (
            None
            if logits_index is None
            else torch.tensor(logits_index, dtype=torch.long, device=dev)
        )
        packs = self.packed.current() if self.packed is not None and len(ids) > 1 else None
        with torch.inference_mode():
            return self.model.forward_cached(
                torch.tensor(ids, dtype=torch.long, device=dev),
                torch.tensor(pos, dtype=torch.long, device=dev),
                self.cache.keys,
                self.cache.values,
                layout,
                index,
                packs,
            )
