"""GRPO math: group-relative advantages, per-token log-probabilities, the clipped loss.

Pure torch functions with no state; the trainer (``core.py``) and the tests call them.

- ``group_advantages``: ``(r - mean) / (std + eps)`` inside one group, with the
  **population** standard deviation (``unbiased=False``; a group of two rewards 0 and 1 gives
  -1 and +1). A group whose rewards are all equal (or a group of one) gives exact zeros.
  ``scale=False`` only centres (the "Dr. GRPO" variant).
- ``token_logprobs``: ``log_softmax(logits)`` gathered at the targets, in float32.
- ``grpo_loss``: the PPO-style clipped surrogate per token, with the importance ratio
  ``exp(new - old)`` against the rollout log-probabilities, plus an optional KL penalty to a
  reference policy with the k3 estimator ``exp(ref - new) - (ref - new) - 1`` (unbiased,
  always >= 0). Tokens outside ``mask`` count for nothing.

Statistics are always token means over the valid tokens (whatever ``length_norm`` is):
``clip_fraction`` is the share of tokens whose clipped term is the active one (its gradient is
zero there), ``approx_kl`` the k3 estimate of KL(old || new), ``kl_ref`` the k3 estimate of
KL(new || ref) (0 without a reference), ``mean_ratio`` the mean importance ratio.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

LengthNorm = Literal["token", "sequence"]


def group_advantages(rewards: Tensor, eps: float = 1e-6, scale: bool = True) -> Tensor:
    """rewards (G,) of one group -> advantages (G,), float32."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (G,), got shape {tuple(rewards.shape)}")
    r = rewards.float()
    if r.numel() < 2 or bool((r == r[0]).all()):
        return torch.zeros_like(r)
    centred = r - r.mean()
    if not scale:
        return centred
    return centred / (r.std(unbiased=False) + eps)


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """logits (B, T, V), targets (B, T) -> log p(target) (B, T), float32."""
    logp = F.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    return logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over ``mask`` (same shape); 0 when the mask is empty."""
    m = mask.to(values.dtype)
    return torch.where(m > 0, values, 0.0).sum() / m.sum().clamp(min=1.0)


def grpo_loss(
    new_logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    ref_logprobs: Tensor | None = None,
    length_norm: LengthNorm = "token",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped policy-gradient loss (a scalar with autograd through ``new_logprobs``) and stats.

    new/old/ref_logprobs, mask (B, T); advantages (B,). ``length_norm="token"`` averages over
    all valid tokens of the batch; ``"sequence"`` averages within each sequence, then over the
    sequences that have at least one valid token.
    """
    if new_logprobs.shape != old_logprobs.shape or new_logprobs.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: new {tuple(new_logprobs.shape)}, old "
            f"{tuple(old_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    if advantages.shape != new_logprobs.shape[:1]:
        raise ValueError(f"advantages must be (B,), got {tuple(advantages.shape)}")
    if kl_coef and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if clip_eps < 0:
        raise ValueError(f"clip_eps must be >= 0, got {clip_eps}")
    if length_norm not in ("token", "sequence"):
        raise ValueError(f"length_norm must be 'token' or 'sequence', got {length_norm!r}")
    mask_f = mask.to(new_logprobs.dtype)  # (B, T)
    valid = mask_f > 0  # padding may hold anything (even inf): it is zeroed before any exp
    adv = advantages.to(new_logprobs.dtype).unsqueeze(-1)  # (B, 1)
    log_ratio = torch.where(valid, new_logprobs - old_logprobs.detach(), 0.0)  # (B, T)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    kl_ref = torch.zeros_like(per_token)
    if ref_logprobs is not None:
        delta = torch.where(valid, ref_logprobs.detach() - new_logprobs, 0.0)  # (B, T)
        kl_ref = torch.exp(delta) - delta - 1.0  # k3 estimate of KL(new || ref), (B, T)
        if kl_coef:
            per_token = per_token + kl_coef * kl_ref
    loss = _reduce(per_token, mask_f, length_norm)
    with torch.no_grad():
        is_clipped = (clipped < unclipped).to(mask_f.dtype)  # the clipped term is active
        stats = {
            "loss": float(loss.detach()),
            "clip_fraction": float(masked_mean(is_clipped, mask_f)),
            "approx_kl": float(masked_mean(torch.expm1(log_ratio) - log_ratio, mask_f)),
            "kl_ref": float(masked_mean(kl_ref, mask_f)),
            "mean_ratio": float(masked_mean(ratio, mask_f)),
        }
    return loss, stats


def _reduce(per_token: Tensor, mask: Tensor, length_norm: LengthNorm) -> Tensor:
    """per_token, mask (B, T) -> scalar."""
    if length_norm == "token":
        return masked_mean(per_token, mask)
    lengths = mask.sum(dim=-1)  # (B,)
    per_seq = torch.where(mask > 0, per_token, 0.0).sum(dim=-1) / lengths.clamp(min=1.0)  # (B,)
    has_tokens = (lengths > 0).to(per_seq.dtype)
    return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
