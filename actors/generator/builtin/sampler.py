"""Sampler: per-token choice and logprob under each request's sampling distribution.

Randomness is counter-based: the uniform that picks the token at absolute position ``pos``
of a request is a hash of (request seed, pos). A request that moves between chunks or
engines therefore draws the same coins as one uninterrupted run, and speculative
verification reuses exactly the coin plain decoding would have used (see ``verify.py``).

A token is drawn by inverse CDF in vocabulary order: the first id whose cumulative
probability exceeds ``u * total``. Tokens with zero probability (filtered out) are never
chosen. Greedy rows (temperature 0) take the argmax; their logprob is the model's own
``log_softmax`` at temperature 1 (the point-mass distribution would always say 0). For
temperature > 0 the logprob is ``log p`` under the distribution after temperature, top-k
(k best logits) and top-p (the smallest set of top tokens whose renormalised mass reaches p).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import torch

from actors.model.sampling import filter_top_k_top_p

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SALT = np.uint64(0x632BE59BD9B4E019)


def request_seed(request_id: str, seed: int | None) -> int:
    """The request's seed, or a stable 64-bit hash of its id when it has none."""
    if seed is not None:
        return seed & 0xFFFF_FFFF_FFFF_FFFF
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


U64 = npt.NDArray[np.uint64]


def _splitmix(z: U64) -> U64:
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    out: U64 = z ^ (z >> np.uint64(31))
    return out


def uniforms(seeds: Sequence[int], positions: Sequence[int]) -> torch.Tensor:
    """(N,) float64 uniforms in [0, 1): one per (seed, absolute token position)."""
    s = np.asarray(seeds, dtype=np.uint64)
    p = np.asarray(positions, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = _splitmix(_splitmix(s ^ (p * _GOLDEN + _SALT)))
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) * 2.0**-53)


@dataclass(frozen=True, slots=True)
class SamplingBatch:
    """Per-token sampling parameters, one entry per logits row."""

    temperature: torch.Tensor  # (N,) float32
    divisor: torch.Tensor  # (N, 1) float32: temperature clamped at 1e-5, divides the logits
    top_k: torch.Tensor  # (N,) long, 0 = off
    top_p: torch.Tensor  # (N,) float32
    uniform: torch.Tensor  # (N,) float64
    is_all_greedy: bool
    has_greedy: bool
    has_filter: bool

    @classmethod
    def build(
        cls,
        temperature: Sequence[float],
        top_k: Sequence[int],
        top_p: Sequence[float],
        seeds: Sequence[int],
        positions: Sequence[int],
    ) -> SamplingBatch:
        is_all_greedy = all(t == 0 for t in temperature)
        has_greedy = any(t == 0 for t in temperature)
        has_filter = any(k > 0 for k in top_k) or any(p < 1 for p in top_p)
        # the clamp in Python equals float32 clamp_min: rounding to float32 is monotonic
        return cls(
            torch.tensor(temperature, dtype=torch.float32),
            torch.tensor([[max(t, 1e-5)] for t in temperature], dtype=torch.float32),
            torch.tensor(top_k, dtype=torch.long),
            torch.tensor(top_p, dtype=torch.float32),
            uniforms(seeds, positions) if not is_all_greedy else torch.zeros(0),
            is_all_greedy,
            has_greedy,
            has_filter,
        )

    def to(self, device: torch.device) -> SamplingBatch:
        """The same batch with its tensors on ``device`` (the logits')."""
        return replace(
            self,
            temperature=self.temperature.to(device),
            divisor=self.divisor.to(device),
            top_k=self.top_k.to(device),
            top_p=self.top_p.to(device),
            uniform=self.uniform.to(device),
        )


def sampling_probs(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """(N, V) logits -> (N, V) probabilities after temperature, top-k and top-p."""
    scaled = logits / batch.divisor
    if batch.has_filter:
        scaled = filter_top_k_top_p(scaled, batch.top_k, batch.top_p)
    return torch.softmax(scaled, dim=-1)


def choose_tokens(logits: torch.Tensor, batch: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, V) logits -> (N,) token ids and (N,) logprobs (see the module docstring)."""
    logits = logits.float()
    if logits.device.type != "cpu":
        batch = batch.to(logits.device)
    if batch.is_all_greedy:
        return _greedy(logits)
    probs = sampling_probs(logits, batch)  # (N, V)
    cdf = probs.double().cumsum(dim=-1)  # (N, V)
    target = (batch.uniform * cdf[:, -1])[:, None]  # (N, 1)
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    tokens = tokens.clamp_max(logits.shape[-1] - 1)
    logprobs = probs.gather(-1, tokens[:, None]).squeeze(-1).log()
    if batch.has_greedy:
        greedy = batch.temperature == 0
        g_tokens, g_logprobs = _greedy(logits)
        tokens = torch.where(greedy, g_tokens, tokens)
        logprobs = torch.where(greedy, g_logprobs, logprobs)
    return tokens, logprobs


def _greedy(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = logits.argmax(dim=-1)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    return tokens, logprobs
