"""PackedWeights: the cached forward's matmuls on fused, oneDNN-packed weight copies (CPU).

At the Qwen2.5-0.5B shape the engine's step is matmuls (``seer bench engine``): one
thread, float32, batch 8, the output head alone took a third of a decode step. torch's
``nn.Linear`` runs MKL's sgemm on the ``(out, in)`` weight; on this project's AMD hosts
oneDNN's kernels on a weight reordered once into their blocked layout ran the same
products 1.3-2x faster for 8-32 rows, and one product over the concatenated q/k/v (and
gate/up) weights replaces three (two). Single-row products (batch-1 decode) are
memory-bound and ran no faster packed, so the caller uses the plain modules for them.

The copies are built from the model's parameters and rebuilt whenever any parameter
changed in place (its version counter moved, as ``load_state_dict`` and optimiser steps
move it) or was replaced; the parameters and their names stay what they are, so weights
load and publish under the Hugging Face names as before. They cost one more copy of the
weights in memory. Products differ from ``nn.Linear``'s in the last bits (another
summation order), as a different batch size's would.

Where torch lacks the oneDNN ops, the weights are not float32 on the CPU or are inference tensors
(no version counter), ``current`` returns None and the plain modules run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: the row count the packed layout is chosen for (a hint: any row count runs on it)
PACK_ROWS = 32


@dataclass(frozen=True, slots=True)
class LayerPack:
    """One block's packed products: q/k/v fused (with its bias), o, gate/up fused, down."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    o_bias: torch.Tensor | None = None  # Llama's attention_bias biases o_proj too


@dataclass(frozen=True, slots=True)
class Packed:
    layers: list[LayerPack]
    lm_head: torch.Tensor


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (N, in) @ a packed (out, in) weight (+ bias) -> (N, out)."""
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    return out


def supported() -> bool:
    """Whether this torch has the oneDNN linear ops."""
    available: bool = torch.backends.mkldnn.is_available()  # type: ignore[no-untyped-call]
    return available and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


class PackedWeights:
    """The packed copies of one model's weights, kept in step with its parameters."""

    def __init__(self, model: nn.Module) -> None:
        """``model``: a ``LlamaModel`` (not imported here: llama.py imports this module)."""
        self.model = model
        self._key: tuple[tuple[int, int], ...] | None = None
        self._packed: Packed | None = None
        self._usable = supported()

    def current(self) -> Packed | None:
        """The packs of the model's weights as they are now, or None (plain path)."""
        if not self._usable:
            return None
        params = list(self.model.parameters())
        try:
            key = tuple((p._version, p.data_ptr()) for p in params)
        except RuntimeError:  # inference tensors keep no version counter: we could not tell
            self._usable = False
            return None
        if key != self._key:
            self._packed = None  # free the stale copies before building new ones
            if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in params):
                self._usable = False
                return None
            self._packed = _pack(self.model)
            self._key = key
        return self._packed


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    packed: torch.Tensor = torch.ops.mkldnn._reorder_linear_weight(
        weight.detach().contiguous(), PACK_ROWS
    )
    return packed


def _pack(model: Any) -> Packed:  # a LlamaModel
    layers = []
    with torch.no_grad():
        for block in model.blocks:
            attn, mlp = block.self_attn, block.mlp
            projs = (attn.q_proj, attn.k_proj, attn.v_proj)
            bias = None
            if attn.q_proj.bias is not None:
                bias = torch.cat([p.bias.detach() for p in projs if p.bias is not None])
            layers.append(
                LayerPack(
                    _reorder(torch.cat([p.weight for p in projs])),
                    bias,
                    _reorder(attn.o_proj.weight),
                    _reorder(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
                    _reorder(mlp.down_proj.weight),
                    None if attn.o_proj.bias is None else attn.o_proj.bias.detach().clone(),
                )
            )
        return Packed(layers, _reorder(model.lm_head.weight))
