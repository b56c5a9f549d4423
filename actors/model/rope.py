"""Rotary inverse frequencies of a ``ModelConfig``: plain (``rope_theta``) or Llama 3.x scaled.

``rope_type`` "llama3" (Hugging Face ``rope_scaling`` / ``rope_parameters`` with
``factor``, ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``)
keeps the high frequencies (wavelength below ``original / high_freq_factor``), divides the
low ones (wavelength above ``original / low_freq_factor``) by ``factor``, and blends the
band between them, as ``transformers``' ``_compute_llama3_parameters`` does. Other scaling
types are refused when a folder is read (``hf_config.py``), never approximated here.
"""

from __future__ import annotations

import math

import torch

from actors.model.config import ModelConfig


def inverse_frequencies(cfg: ModelConfig) -> torch.Tensor:
    """(head_dim / 2,) float64 inverse frequencies of the rotary embedding."""
    dim = cfg.head_dim
    inv = 1.0 / cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if cfg.rope_type == "llama3":
        inv = _llama3(inv, cfg)
    return inv


def _llama3(inv: torch.Tensor, cfg: ModelConfig) -> torch.Tensor:
    factor, low, high = cfg.rope_factor, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
    old_context = cfg.rope_original_context
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)
