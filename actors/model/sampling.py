"""The sampling transform: the distribution a request samples from, given its logits.

Temperature divides the logits; top-k keeps the k best; top-p keeps the smallest set of top
tokens whose renormalised mass reaches p. The built-in engine's sampler draws from it
(``actors.generator.builtin.sampler``) and the trainer recomputes its logprobs through it
(``transformed_logits``), so both sides agree on what was sampled.
"""

from __future__ import annotations

import torch


def transformed_logits(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """(..., V) logits -> the logits of the distribution one request samples from: divided
    by the temperature, tokens outside top-k / top-p at -inf (``log_softmax`` of the result
    is the logprob the sampler records). Temperature 0 (greedy) records the model's own
    distribution, so the logits come back unchanged. Differentiable in the kept logits (the
    trainer's new logprobs go through it)."""
    if temperature == 0:
        return logits
    scaled = logits.float() / max(temperature, 1e-5)
    if top_k <= 0 and top_p >= 1:
        return scaled
    flat = scaled.detach().reshape(-1, scaled.shape[-1])  # (N, V)
    n = flat.shape[0]
    with torch.no_grad():
        kept = filter_top_k_top_p(
            flat,
            torch.full((n,), top_k, dtype=torch.long, device=flat.device),
            torch.full((n,), top_p, dtype=torch.float32, device=flat.device),
        ).isfinite()
    return scaled.masked_fill(~kept.reshape(scaled.shape), float("-inf"))


def filter_top_k_top_p(
    scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
) -> torch.Tensor:
    """(N, V) scaled logits, (N,) top-k (0 = off) and (N,) top-p -> the logits with the
    tokens outside each row's top-k and top-p at -inf."""
    ordered, order = scaled.sort(dim=-1, descending=True)  # (N, V)
    ranks = torch.arange(scaled.shape[-1], device=scaled.device)[None, :]
    k = torch.where(top_k > 0, top_k, scaled.shape[-1])[:, None]
    ordered = ordered.masked_fill(ranks >= k, float("-inf"))
    probs = torch.softmax(ordered, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    cut = (mass_before >= top_p[:, None]) & (top_p < 1)[:, None]
    ordered = ordered.masked_fill(cut, float("-inf"))
    return torch.empty_like(scaled).scatter_(-1, order, ordered)
