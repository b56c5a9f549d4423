"""LlamaModel: a Llama-style decoder in plain torch (RMSNorm, rotary, SwiGLU, GQA).

Two entry points share the weights:

- ``forward(input_ids)``: ``(B, T)`` tokens -> ``(B, T, V)`` logits with causal attention and
  no cache; the trainer and the tests' reference path use it (autograd works).
- ``forward_cached(input_ids, positions, k_cache, v_cache, layout)``: ``N`` flat new tokens
  of several sequences, their explicit positions, and per-layer slot buffers; writes the new
  tokens' K/V into the cache and returns their ``(N, V)`` logits (or only the rows picked by
  ``logits_index``). Batched decode, chunked prefill and tree verification are all this one
  call with different ``BatchLayout``s (see ``layout.py``). Given ``packed`` weights (the
  engine's, ``packed.py``), its matmuls run fused on those instead of the modules.

Rotary uses the "rotate half" convention of Hugging Face Llama, so HF checkpoints load as is.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from actors.model.config import ModelConfig
from actors.model.layout import BatchLayout
from actors.model.packed import LayerPack, Packed, linear
from actors.model.rope import inverse_frequencies


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class Rotary(nn.Module):
    """cos and signed sin tables for every position up to ``max_context``: ``(P, D)`` each.

    ``sin``'s first half is negated so that rotate-half is one ``roll`` (see
    ``apply_rotary``); negation is exact, so the result is bit for bit the textbook form."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        inv = inverse_frequencies(cfg)  # (D/2,) float64, Llama 3 scaling included
        max_context = cfg.max_context
        freqs = torch.outer(torch.arange(max_context, dtype=torch.float64), inv)  # (P, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
        sign = torch.cat([-torch.ones_like(freqs), torch.ones_like(freqs)], dim=-1)
        self.register_buffer("cos", emb.cos().float(), persistent=False)
        self.register_buffer("sin", (emb.sin() * sign).float(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[positions], self.sin[positions]  # (..., D) each


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., H, D), cos/signed sin (..., 1, D) -> rotated x.

    Rotate-half ``cat([-x2, x1]) * sin`` equals ``cat([x2, x1]) * cat([-s1, s2])`` exactly,
    and ``cat([x2, x1])`` is ``x`` rolled by half a head: one op instead of four."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        kv_dim, q_dim = cfg.num_kv_heads * cfg.head_dim, cfg.num_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, q_dim, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden, kv_dim, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden, kv_dim, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(q_dim, cfg.hidden, bias=cfg.output_bias)
        self.is_gqa = cfg.num_kv_heads != cfg.num_heads
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None  # Qwen3
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def _qkv(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        packed: LayerPack | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lead = x.shape[:-1]
        if packed is None:
            qp, kp, vp = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:  # one product, split into column views
            kv_dim = self.num_kv_heads * self.head_dim
            fused = linear(x, packed.qkv, packed.qkv_bias)
            qp, kp, vp = fused.split_with_sizes(
                [fused.shape[-1] - 2 * kv_dim, kv_dim, kv_dim], dim=-1
            )
        q = qp.view(*lead, self.num_heads, self.head_dim)
        k = kp.view(*lead, self.num_kv_heads, self.head_dim)
        v = vp.view(*lead, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (B, T, hidden), causal, no cache."""
        bsz, seq, _ = x.shape
        q, k, v = (t.transpose(1, 2) for t in self._qkv(x, cos, sin))  # (B, H, T, D)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.is_gqa)
        out: torch.Tensor = self.o_proj(o.transpose(1, 2).reshape(bsz, seq, -1))
        return out

    def forward_cached(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        layout: BatchLayout,
        packed: LayerPack | None = None,
    ) -> torch.Tensor:
        """x (N, hidden) flat new tokens; k_cache/v_cache (S, Hkv, C, D) slot buffers."""
        q, k, v = self._qkv(x, cos, sin, packed)  # (N, H, D), (N, Hkv, D), (N, Hkv, D)
        k_cache[layout.write_slot, :, layout.write_pos] = k
        v_cache[layout.write_slot, :, layout.write_pos] = v
        rows, q_max = layout.num_rows, layout.q_len_max
        if layout.flat_to_pad is not None:
            padded = q.new_zeros(rows * q_max, self.num_heads, self.head_dim)
            padded[layout.flat_to_pad] = q
            q = padded
        q = q.view(rows, q_max, self.num_heads, self.head_dim).transpose(1, 2)  # (B,H,Q,D)
        lo, hi = layout.slot_start, layout.slot_start + rows
        keys = k_cache[lo:hi, :, : layout.kv_len]  # (B, Hkv, T, D) strided view, no copy
        values = v_cache[lo:hi, :, : layout.kv_len]
        o = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=layout.mask, enable_gqa=self.is_gqa
        )  # (B,H,Q,D)
        o = o.transpose(1, 2).reshape(rows * q_max, -1)  # (B*Q, H*D)
        if layout.flat_to_pad is not None:
            o = o[layout.flat_to_pad]
        out: torch.Tensor = self.o_proj(o) if packed is None else linear(o, packed.o, packed.o_bias)
        return out  # (N, hidden)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out

    def forward_packed(self, x: torch.Tensor, packed: LayerPack) -> torch.Tensor:
        """``forward`` on the packed weights: gate and up in one product."""
        gate, up = linear(x, packed.gate_up).chunk(2, dim=-1)
        return linear(F.silu(gate) * up, packed.down)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h2: torch.Tensor = self.mlp(self.post_attention_layernorm(x))
        return x + h2

    def forward_cached(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        layout: BatchLayout,
        packed: LayerPack | None = None,
    ) -> torch.Tensor:
        h = self.self_attn.forward_cached(
            self.input_layernorm(x), cos, sin, k_cache, v_cache, layout, packed
        )
        x = x + h
        normed = self.post_attention_layernorm(x)
        h2 = self.mlp(normed) if packed is None else self.mlp.forward_packed(normed, packed)
        return x + h2


class LlamaModel(nn.Module):
    """Embedding, ``num_layers`` blocks, final norm, output head. Parameter names follow HF
    Llama minus the ``model.`` prefix, so checkpoints map one to one."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rotary = Rotary(cfg)

    @classmethod
    def random(cls, cfg: ModelConfig, seed: int = 0, std: float = 0.02) -> LlamaModel:
        """A model with seeded normal(0, std) weights (norms at 1, biases at 0)."""
        model = cls(cfg)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(("layernorm.weight", "_norm.weight")) or name == "norm.weight":
                    param.fill_(1.0)
                elif name.endswith(".bias"):
                    param.zero_()
                else:
                    param.copy_(torch.randn(param.shape, generator=gen) * std)
        return model

    @property
    def blocks(self) -> list[Block]:
        return [cast(Block, layer) for layer in self.layers]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V); positions 0..T-1, causal, no cache."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        cos, sin = self.rotary(positions)  # (T, D)
        x = self.embed_tokens(input_ids)  # (B, T, hidden)
        for layer in self.blocks:
            x = layer(x, cos, sin)
        logits: torch.Tensor = self.lm_head(self.norm(x))
        return logits

    def forward_cached(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        k_cache: list[torch.Tensor],
        v_cache: list[torch.Tensor],
        layout: BatchLayout,
        logits_index: torch.Tensor | None = None,
        packed: Packed | None = None,
    ) -> torch.Tensor:
        """input_ids/positions (N,) -> logits (N, V), or (M, V) for ``logits_index`` (M,).
        ``packed``: run the matmuls on these copies of this model's weights."""
        cos, sin = self.rotary(positions)  # (N, D)
        x = self.embed_tokens(input_ids)  # (N, hidden)
        packs = packed.layers if packed is not None else [None] * len(self.layers)
        for layer, kc, vc, pack in zip(self.blocks, k_cache, v_cache, packs, strict=True):
            x = layer.forward_cached(x, cos, sin, kc, vc, layout, pack)
        if logits_index is not None:
            x = x[logits_index]
        if packed is not None and x.shape[0] > 1:
            return linear(self.norm(x), packed.lm_head)
        logits: torch.Tensor = self.lm_head(self.norm(x))
        return logits
