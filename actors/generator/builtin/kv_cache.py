"""KVCache: preallocated per-layer K/V slot buffers plus compact copies of parked requests.

Running requests own the slots ``[0, num_slots)`` of ``(S, Hkv, C, D)`` buffers, one pair
per layer, so a batched forward attends over a contiguous strided view (no gather). A
request leaving the batch early is moved (``move``), keeping rows contiguous; a request whose
chunk ended is copied out into a ``ParkedKV`` of exactly its length (``park``) and copied
back into a slot when its next chunk arrives (``restore``). Accepted tree-draft tokens are
compacted next to their prefix (``compact``); rejected draft KV is simply left beyond the
request's length and overwritten later.

This class keeps tensors only; the token budget is booked by the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from actors.model.config import ModelConfig


@dataclass(frozen=True, slots=True)
class ParkedKV:
    keys: list[torch.Tensor]  # per layer (Hkv, n, D)
    values: list[torch.Tensor]  # per layer (Hkv, n, D)
    num_tokens: int


class KVCache:
    def __init__(
        self,
        cfg: ModelConfig,
        num_slots: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_slots, cfg.num_kv_heads, capacity, cfg.head_dim)
        self.num_slots = num_slots
        self.capacity = capacity
        self.device = torch.device(device)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        self.values = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)
        ]

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` tokens of slot ``src`` into slot ``dst``."""
        if src == dst or length == 0:
            return
        for buf in (*self.keys, *self.values):
            buf[dst, :, :length] = buf[src, :, :length]

    def park(self, slot: int, length: int) -> ParkedKV:
        keys = [k[slot, :, :length].clone() for k in self.keys]
        values = [v[slot, :, :length].clone() for v in self.values]
        return ParkedKV(keys, values, length)

    def restore(self, slot: int, parked: ParkedKV, length: int) -> None:
        """Copy the first ``length`` (<= parked) tokens of ``parked`` into ``slot``."""
        for buf, saved in zip(
            (*self.keys, *self.values), (*parked.keys, *parked.values), strict=True
        ):
            buf[slot, :, :length] = saved[:, :length]

    def compact(self, slot: int, src: Sequence[int], dst: Sequence[int]) -> None:
        """Move tokens at cache indices ``src`` to ``dst`` (accepted tree nodes)."""
        moves = [(s, d) for s, d in zip(src, dst, strict=True) if s != d]
        if not moves:
            return
        src_idx = torch.tensor([s for s, _ in moves], device=self.device)
        dst_idx = torch.tensor([d for _, d in moves], device=self.device)
        for buf in (*self.keys, *self.values):
            buf[slot, :, dst_idx] = buf[slot, :, src_idx]  # gather first: overlap-safe
