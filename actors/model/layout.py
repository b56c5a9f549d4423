"""BatchLayout: where a cached forward reads and writes KV, and which keys each query sees.

The engine keeps K and V per layer in preallocated slot buffers ``(S, Hkv, C, D)``; the rows
of one forward occupy the contiguous slots ``[slot_start, slot_start + B)`` so attention reads
a strided view, never a copy. Row ``b`` holds ``ctx_lens[b]`` cached tokens and feeds
``q_lens[b]`` new tokens, whose K/V are written at ``ctx_lens[b] + j`` before attention.
New tokens see the whole cached prefix plus the new tokens their ``q_mask`` allows: causal
for a prefill piece or a chain, ancestor-or-self for a draft tree. Positions (for rotary)
are given separately, so a tree node sits at ``context length + depth``.

New tokens travel flat ``(N, hidden)`` through the projections and MLP (no padding waste) and
are scattered into a padded ``(B, Qmax)`` grid only for attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class BatchLayout:
    """Precomputed indexing for one cached forward; built once, reused by every layer."""

    slot_start: int
    num_rows: int  # B
    q_len_max: int  # Qmax
    kv_len: int  # T: keys read per row (the longest row's ctx + q_len)
    write_slot: torch.Tensor  # (N,) slot of each new token
    write_pos: torch.Tensor  # (N,) cache index of each new token
    flat_to_pad: torch.Tensor | None  # (N,) index into B*Qmax; None when N == B*Qmax
    mask: torch.Tensor | None  # (B, 1, Qmax, T) bool, True = may attend; None = all keys


def causal_mask(q_len: int) -> torch.Tensor:
    """(q, q) lower-triangular bool: a prefill piece or a chain draft."""
    return torch.ones(q_len, q_len, dtype=torch.bool).tril_()


def build_layout(
    slot_start: int,
    ctx_lens: Sequence[int],
    q_lens: Sequence[int],
    q_masks: Sequence[torch.Tensor | None] | None = None,
    device: torch.device | None = None,
) -> BatchLayout:
    """Layout for rows with ``ctx_lens[b]`` cached and ``q_lens[b]`` new tokens each.

    ``q_masks[b]`` is a ``(q_lens[b], q_lens[b])`` bool mask among the new tokens (None:
    causal). All rows with one new token and no cached prefix beyond need no mask at all.
    Indices and mask are built on the CPU and moved to ``device`` (the KV cache's) at once.
    """
    num_rows = len(ctx_lens)
    q_max = max(q_lens)
    kv_len = max(c + q for c, q in zip(ctx_lens, q_lens, strict=True))
    # index lists in Python: at decode shapes a dozen tiny tensor ops cost more than this
    write_slot = [slot_start + b for b, q in enumerate(q_lens) for _ in range(q)]
    write_pos = [c + j for c, q in zip(ctx_lens, q_lens, strict=True) for j in range(q)]
    dense = all(q == q_max for q in q_lens)
    flat_to_pad = None
    if not dense:
        pad = [b * q_max + j for b, q in enumerate(q_lens) for j in range(q)]
        flat_to_pad = torch.tensor(pad, dtype=torch.long, device=device)
    mask = None
    if q_max > 1 or any(c + 1 != kv_len for c in ctx_lens):  # else plain decode, equal lengths
        ctx = torch.tensor(ctx_lens, dtype=torch.long)  # (B,)
        qln = torch.tensor(q_lens, dtype=torch.long)  # (B,)
        mask = _attention_mask(ctx, qln, q_max, kv_len, q_masks).to(device or "cpu")
    return BatchLayout(
        slot_start,
        num_rows,
        q_max,
        kv_len,
        torch.tensor(write_slot, dtype=torch.long, device=device),
        torch.tensor(write_pos, dtype=torch.long, device=device),
        flat_to_pad,
        mask,
    )


def _attention_mask(
    ctx: torch.Tensor,
    qln: torch.Tensor,
    q_max: int,
    kv_len: int,
    q_masks: Sequence[torch.Tensor | None] | None,
) -> torch.Tensor:
    num_rows = ctx.shape[0]
    t = torch.arange(kv_len)  # (T,)
    rel = t[None, :] - ctx[:, None]  # (B, T): index among the new tokens
    prefix = (rel < 0)[:, None, :]  # (B, 1, T)
    in_new = ((rel >= 0) & (rel < qln[:, None]))[:, None, :]  # (B, 1, T)
    tree = causal_mask(q_max)[None].repeat(num_rows, 1, 1)  # (B, Qmax, Qmax)
    for b, m in enumerate(q_masks or ()):
        if m is not None:
            n = m.shape[0]
            tree[b, :n, :n] = m
    idx = rel.clamp(0, q_max - 1)[:, None, :].expand(num_rows, q_max, kv_len)
    new_ok = torch.gather(tree, 2, idx) & in_new  # (B, Qmax, T)
    mask = prefix | new_ok
    pad_rows = torch.arange(q_max)[None, :] >= qln[:, None]  # (B, Qmax)
    mask[:, :, 0] |= pad_rows  # padded queries see one key: no all-masked rows (NaN)
    return mask[:, None]  # (B, 1, Qmax, T)
