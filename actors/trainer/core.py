"""GRPOTrainer: the trainer's pure synchronous core (no sockets, no await).

Consumes a list of ``TrainSample`` (one finished rollout request each); updates the model in
place with GRPO and emits statistics. The actor shell around it receives samples, calls
``step``, then publishes ``state_dict()`` as weight version ``trainer.version``. The trainer
owns the weight version: nobody else keeps a copy; the driver reads it from ``TrainReport``.

Contract of ``step(samples)``:

- **On-policy is checked, not assumed, here alone.** Every chunk of every sample must carry
  the trainer's current version ``v`` (the one it published; ``weight_versions``); otherwise
  ``OffPolicyError`` names the first offending request and *nothing* has changed (weights,
  optimiser, RNG, version).
- **Degenerate groups are skipped.** A group whose rewards are all equal has zero
  advantage, so with ``kl_coef == 0`` its members contribute no gradient and are dropped
  before the forward pass, except those whose mistake step credit located (``batch.py``
  ``rows_to_train``, the rule the ranks' path applies too); they still count in
  ``reward_mean``/``reward_std``; ``num_skipped_groups`` adds up 1/G per dropped member.
  With ``kl_coef > 0`` they are kept, because the KL term still pulls them.
- **Optimiser steps.** Each of ``epochs`` passes shuffles the kept samples with the trainer's
  seeded generator and cuts them into mini-batches of ``mini_batch_size`` samples (``None``:
  one mini-batch, i.e. one optimiser step per epoch). A mini-batch is split into
  micro-batches of ``micro_batch_size`` samples of similar length (sorted, right-trimmed)
  whose gradients accumulate, weighted so the result equals the unsplit mini-batch loss;
  then the gradient norm is clipped to ``max_grad_norm`` and AdamW steps.
- **A step is all or nothing.** A failure part-way (a non-finite loss or gradient in any
  mini-batch, a lost rank in a collective) restores the weights, optimiser state and
  shuffling RNG taken just before the step (``restore_on_failure``, the default: one copy
  of the weights and optimiser state, kept on the model's device: three times the
  weights' bytes with AdamW; on the toy RL model, 10 MiB and about 0.1 s against a 3 s
  step on a busy 2-core host) and raises ``TrainStepError``; the version is
  unchanged, so nothing is published. With ``restore_on_failure=False`` (no room for the
  copy) the trainer instead becomes unusable: every later step raises ``TrainStepError``.
- **Same distribution as the rollout.** ``sampling`` (temperature, top-k, top-p) transforms
  the logits before the new (and reference) logprobs, exactly as the generator's sampler
  did for the old ones (``transformed_logits``); temperature 0 (greedy) and the default
  use the model's own distribution.
- On success ``version`` increments: it is the version the new weights carry.

``torch.set_num_threads`` is the caller's business; each micro-batch moves to the model's
device. The reference model (for the KL term) is frozen and never saved by checkpoints: it
is the run's starting model, which the caller rebuilds the same way on resume.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from actors.errors import OffPolicyError
from actors.model import LlamaModel
from actors.model.sampling import transformed_logits
from actors.trainer.batch import TrainBatch, TrainSample, flat_shares, make_batch, rows_to_train
from actors.trainer.grpo import LengthNorm, grpo_loss, token_logprobs

_STEP_STATS = ("loss", "grad_norm", "clip_fraction", "approx_kl", "kl_ref", "mean_ratio")


@dataclass(frozen=True, slots=True)
class SamplingTransform:
    """The distribution the rollout sampled from (temperature, top-k, top-p): new logprobs
    are computed under the same transform as the generator's recorded ones, so the first
    importance ratio of an on-policy step is 1 at any temperature."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"invalid sampling transform {self}")

    @property
    def is_identity(self) -> bool:
        return self.temperature in (0.0, 1.0) and self.top_k == 0 and self.top_p >= 1.0

    def logprobs(self, logits: Tensor, targets: Tensor) -> Tensor:
        """logits (B, T, V), targets (B, T) -> log p(target) (B, T) under this transform,
        as the generator's sampler records it (a filtered-out target gives -inf)."""
        t = transformed_logits(logits, self.temperature, self.top_k, self.top_p)
        return token_logprobs(t, targets)


class TrainStepError(RuntimeError):
    """A GRPO step failed part-way; the weights, optimiser and version are those before it
    (or, without ``restore_on_failure``, the trainer is unusable from now on)."""


class GRPOTrainer:
    def __init__(
        self,
        model: LlamaModel,
        *,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        max_grad_norm: float = 1.0,
        clip_eps: float = 0.2,
        kl_coef: float = 0.0,
        micro_batch_size: int = 16,
        mini_batch_size: int | None = None,
        epochs: int = 1,
        pad_id: int = 0,
        ref_model: LlamaModel | None = None,
        length_norm: LengthNorm = "token",
        seed: int = 0,
        restore_on_failure: bool = True,
    ) -> None:
        _check_positive(micro_batch_size=micro_batch_size, epochs=epochs, lr=lr)
        _check_positive(max_grad_norm=max_grad_norm)
        if mini_batch_size is not None:
            _check_positive(mini_batch_size=mini_batch_size)
        if kl_coef < 0 or clip_eps < 0 or weight_decay < 0:
            raise ValueError("kl_coef, clip_eps and weight_decay must be >= 0")
        if kl_coef > 0 and ref_model is None:
            raise ValueError("kl_coef > 0 needs a ref_model")
        if not 0 <= pad_id < model.config.vocab_size:
            vocab = model.config.vocab_size
            raise ValueError(f"pad_id {pad_id} outside the vocabulary [0, {vocab})")
        self.model = model
        self.ref_model = ref_model
        if ref_model is not None:
            ref_model.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.clip_eps = clip_eps
        self.kl_coef = kl_coef
        self.micro_batch_size = micro_batch_size
        self.mini_batch_size = mini_batch_size
        self.epochs = epochs
        self.pad_id = pad_id
        self.length_norm: LengthNorm = length_norm
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0
        self.sampling = SamplingTransform()
        self.restore_on_failure = restore_on_failure
        self.broken: str = ""  # why the trainer is unusable ("" while it is fine)

    def state_dict(self) -> dict[str, Tensor]:
        """A detached copy of the model's weights (safe to publish while training goes on)."""
        return {name: t.detach().clone() for name, t in self.model.state_dict().items()}

    def check_on_policy(self, samples: Sequence[TrainSample]) -> None:
        """Every chunk of every sample was generated with this trainer's current weights."""
        for sample in samples:
            versions = set(sample.weight_versions)
            if versions != {self.version}:
                raise OffPolicyError(
                    f"off-policy sample refused: request {sample.name} was generated with "
                    f"weight versions {sorted(versions)}, expected only {self.version}"
                )

    def step(
        self,
        samples: Sequence[TrainSample],
        *,
        sampling: SamplingTransform | None = None,
    ) -> dict[str, float]:
        """One GRPO update on one rollout's samples; see the module docstring."""
        start = time.perf_counter()
        if not samples:
            raise ValueError("step needs at least one sample")
        self.check_usable()
        self.check_on_policy(samples)
        self.sampling = sampling or SamplingTransform()
        batch = make_batch(samples, self.pad_id)
        rows, num_skipped = self._rows_to_train(samples)
        gap = self._logprob_gap(batch)  # before the first update: the engines' agreement
        per_step: list[dict[str, float]] = []
        with self.all_or_nothing():
            for _ in range(self.epochs if len(rows) else 0):
                order = rows[torch.randperm(len(rows), generator=self.generator)]
                size = self.mini_batch_size or max(1, len(rows))
                per_step.extend(self._optimizer_step(batch, mini) for mini in _chunks(order, size))
        self.version += 1
        stats = {k: _mean([s[k] for s in per_step]) for k in _STEP_STATS}
        return (
            stats
            | gap
            | {
                "reward_mean": float(batch.rewards.mean()),
                "reward_std": float(batch.rewards.std(unbiased=False)),
                "num_tokens": float(batch.mask[rows].sum()),
                "num_samples": float(len(samples)),
                "num_skipped_groups": float(num_skipped),
                "num_optimizer_steps": float(len(per_step)),
                "version": float(self.version),
                "seconds": time.perf_counter() - start,
            }
        )

    def check_usable(self) -> None:
        if self.broken:
            raise TrainStepError(f"trainer unusable since a failed step: {self.broken}")

    @contextlib.contextmanager
    def all_or_nothing(self) -> Iterator[None]:
        """Run a step's optimiser steps; on any failure put back the weights, optimiser
        state and RNG of before (or mark the trainer unusable) and raise `TrainStepError`."""
        saved = self._snapshot() if self.restore_on_failure else None
        try:
            yield
        except Exception as exc:
            self.optimizer.zero_grad(set_to_none=True)
            why = f"{type(exc).__name__}: {exc}"
            if saved is None:
                self.broken = why
                raise TrainStepError(f"step failed, trainer now unusable: {why}") from exc
            self._restore(saved)
            raise TrainStepError(
                f"step failed, weights and optimiser restored to version {self.version}: {why}"
            ) from exc

    def _snapshot(self) -> tuple[dict[str, Tensor], dict[str, Any], Tensor]:
        weights = {k: t.detach().clone() for k, t in self.model.state_dict().items()}
        optimizer = copy.deepcopy(self.optimizer.state_dict())  # tensors copied, same device
        return weights, optimizer, self.generator.get_state()

    @torch.no_grad()
    def _restore(self, saved: tuple[dict[str, Tensor], dict[str, Any], Tensor]) -> None:
        weights, optimizer, rng = saved
        for name, tensor in self.model.state_dict().items():
            tensor.copy_(weights[name])
        self.optimizer.load_state_dict(optimizer)
        self.generator.set_state(rng)

    @torch.no_grad()
    def _logprob_gap(self, batch: TrainBatch) -> dict[str, float]:
        """Mean and max |trainer - rollout| log-probability over every sampled token of
        `batch`, under the weights the rollout used: near 1e-5 when both sides compute the
        same maths in float32; what changes when the engine, dtype or device does."""
        total, count, worst = 0.0, 0, 0.0
        for micro_rows in _chunks(torch.arange(batch.mask.shape[0]), self.micro_batch_size):
            micro = batch.select(micro_rows).to(next(self.model.parameters()).device)
            new = self.sampling.logprobs(self.model(micro.input_ids), micro.targets)
            mask = micro.mask.bool() & torch.isfinite(micro.old_logprobs)
            diff = (new.float() - micro.old_logprobs).abs()[mask]
            if diff.numel():
                total += float(diff.sum())
                count += diff.numel()
                worst = max(worst, float(diff.max()))
        return {"logprob_gap_mean": total / count if count else 0.0, "logprob_gap_max": worst}

    def _rows_to_train(self, samples: Sequence[TrainSample]) -> tuple[Tensor, float]:
        """Indices (K,) of the samples that train, and the skipped groups (`rows_to_train`,
        the rule the ranks' path applies too)."""
        located = [s.error_index >= 0 for s in samples]
        keep, skipped = rows_to_train(flat_shares(samples), located, kl_coef=self.kl_coef)
        return torch.tensor(keep, dtype=torch.long), skipped

    def _optimizer_step(self, batch: TrainBatch, rows: Tensor) -> dict[str, float]:
        """Accumulate the loss of ``rows`` over micro-batches, clip, step; per-step stats."""
        num_tokens = float(batch.mask[rows].sum())
        if num_tokens == 0:
            return dict.fromkeys(_STEP_STATS, 0.0)
        num_seqs = float((batch.mask[rows].sum(dim=-1) > 0).sum())
        self.optimizer.zero_grad(set_to_none=True)
        totals = self._accumulate(batch, rows, num_tokens, num_seqs)
        _check_finite_loss(totals["loss"])
        return totals | {"grad_norm": self._clip_and_step()}

    def _accumulate(
        self, batch: TrainBatch, rows: Tensor, num_tokens: float, num_seqs: float
    ) -> dict[str, float]:
        """Backward ``rows`` micro-batch by micro-batch (similar lengths together), each
        weighted by its share of ``num_tokens`` (or ``num_seqs`` with sequence-level
        normalisation), so the gradients sum to the loss over all of them; the totals may
        count other ranks' rows too. Token-weighted stats of these rows."""
        totals = dict.fromkeys(_STEP_STATS, 0.0)
        positions = torch.arange(1, batch.mask.shape[1] + 1, dtype=batch.mask.dtype)  # (T,)
        ends = (batch.mask[rows] * positions).amax(dim=-1)  # (K,) one past the last target
        rows = rows[torch.argsort(ends, stable=True)]  # similar lengths share a micro-batch
        for micro_rows in _chunks(rows, self.micro_batch_size):
            micro = batch.select(micro_rows)
            loss, stats = self._micro_loss(micro)
            if self.length_norm == "token":
                weight = micro.num_tokens / num_tokens
            else:
                weight = float((micro.mask.sum(-1) > 0).sum()) / num_seqs
            torch.autograd.backward(loss * weight)
            share = micro.num_tokens / num_tokens  # token-weighted stats
            for key in ("clip_fraction", "approx_kl", "kl_ref", "mean_ratio"):
                totals[key] += stats[key] * share
            totals["loss"] += stats["loss"] * weight
        return totals

    def _clip_and_step(self) -> float:
        """Clip the accumulated gradient, step AdamW, clear; the norm before clipping. A
        non-finite norm raises ``FloatingPointError`` with nothing applied."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"non-finite gradient norm {grad_norm}: step not applied")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def _micro_loss(self, micro: TrainBatch) -> tuple[Tensor, dict[str, float]]:
        device = next(self.model.parameters()).device
        if device.type != "cpu":  # batches are made on the CPU; the model may be elsewhere
            micro = micro.to(device)
        new_logprobs = self.sampling.logprobs(self.model(micro.input_ids), micro.targets)
        ref_logprobs = None
        if self.ref_model is not None:
            with torch.no_grad():
                ref_logits = self.ref_model(micro.input_ids)
                ref_logprobs = self.sampling.logprobs(ref_logits, micro.targets)
        return grpo_loss(
            new_logprobs,
            micro.old_logprobs,
            micro.advantages,
            micro.mask,
            clip_eps=self.clip_eps,
            kl_coef=self.kl_coef,
            ref_logprobs=ref_logprobs,
            length_norm=self.length_norm,
        )


def _check_finite_loss(loss: float) -> None:
    """Before any optimiser step: a non-finite loss (its gradient may still look finite)."""
    if not math.isfinite(loss):
        raise FloatingPointError(f"non-finite loss {loss} in a mini-batch: step not applied")


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"GRPOTrainer {name} must be > 0, got {value!r}")


def _chunks(rows: Tensor, size: int) -> list[Tensor]:
    """rows (K,) -> consecutive pieces of at most ``size``."""
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
