"""RankedGRPOTrainer: the GRPO step data-parallel across trainer ranks (gradients all-reduced).

Each rank holds a shard of the iteration's samples, whole GRPO groups (advantages and the
skipping of flat groups are computed per group, so a group never spans ranks). ``step_shard``
runs the same update as ``GRPOTrainer.step`` on the union of the shards:

- **The objective is the single-rank one.** With token-level normalisation the loss is the
  sum over every trained token of every rank divided by the *global* token count (an
  all-reduce of the local counts), so a micro-batch's weight is ``tokens / global_tokens``;
  with sequence-level normalisation, ``sequences / global_sequences``. The gradients are then
  summed over the ranks (one flat all-reduce per optimiser step, the bucket DDP would send),
  never averaged, so the summed gradient is exactly the single-rank gradient; clipping and
  AdamW then run identically on every rank and the weights stay identical.
- **Optimiser steps agree.** With ``mini_batch_size`` set, the number of mini-batches per
  epoch is ``ceil(global_kept / mini_batch_size)`` on every rank, each rank cutting its own
  shuffled rows into that many pieces (some may be empty). With ``mini_batch_size=None``
  (one step per epoch) the step equals ``GRPOTrainer.step`` on all samples within float
  rounding; with mini-batches it is the same algorithm, but the mini-batches contain other
  samples than a single rank's shuffle would pick.
- **Failure is collective.** The on-policy check runs on every rank, then the ranks agree
  (all-reduce of a flag) before anything changes, so one rank's off-policy sample refuses the
  step on every rank (``OffPolicyError``) instead of leaving the others in a collective.
- **Log-probabilities under the sampling transform.** The rollout's ``old_logprobs`` are
  ``log p`` under temperature, top-k and top-p (the generator's sampler); ``transform``
  carries them so the new log-probabilities are computed under the same distribution.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from actors.errors import OffPolicyError
from actors.trainer.batch import (
    TrainBatch,
    TrainSample,
    credit_advantages,
    make_batch,
    rows_to_train,
)
from actors.trainer.core import (
    _STEP_STATS,
    GRPOTrainer,
    SamplingTransform,
    _check_finite_loss,
)
from actors.trainer.ranks import all_reduce_min, all_reduce_sum


class RankedGRPOTrainer(GRPOTrainer):
    """A ``GRPOTrainer`` whose ``step_shard`` trains on this rank's shard with the others."""

    transform: SamplingTransform = SamplingTransform()

    def step_shard(
        self,
        samples: Sequence[TrainSample],
        *,
        transform: SamplingTransform | None = None,
        advantages: Sequence[float] | None = None,
        flat_share: Sequence[float] | None = None,
    ) -> dict[str, float]:
        """One data-parallel GRPO update; every rank calls it once per iteration.

        Without ``advantages`` the shard holds whole groups and they are computed here;
        with them (a group spanning ranks, advantages computed where it completed),
        ``flat_share`` marks members of flat groups (1/G each, else 0), skipped like
        ``GRPOTrainer`` skips flat groups."""
        start = time.perf_counter()
        self.check_usable()
        self._agree_on_policy(samples)
        self.transform = transform or SamplingTransform()
        self.sampling = self.transform  # GRPOTrainer's loss takes logprobs under it
        batch = make_batch(samples, self.pad_id) if samples else None
        num_skipped: float
        if advantages is None:
            rows, num_skipped = self._rows_to_train(samples) if samples else (_empty(), 0)
        else:
            located = [s.error_index >= 0 for s in samples]
            batch, rows, num_skipped = self._given_advantages(
                batch, advantages, flat_share, located
            )
        totals = torch.zeros(6, dtype=torch.float64)
        totals[0], totals[3], totals[5] = len(samples), len(rows), num_skipped
        if batch is not None:
            rewards = batch.rewards.double()
            totals[1], totals[2] = rewards.sum(), (rewards**2).sum()
            totals[4] = batch.mask[rows].sum()
        n, r_sum, r_sq, kept, tokens, skipped = all_reduce_sum(totals).tolist()
        if n == 0:
            raise ValueError("step needs at least one sample on some rank")
        # this rank's shard only (rank 0's is what the run reports)
        gap = self._logprob_gap(batch) if batch is not None else {}
        per_step: list[dict[str, float]] = []
        num_minis = math.ceil(kept / self.mini_batch_size) if self.mini_batch_size else 1
        with self.all_or_nothing():  # a lost rank or non-finite loss changes nothing
            for _ in range(self.epochs if kept else 0):
                order = rows[torch.randperm(len(rows), generator=self.generator)]
                for mini in torch.tensor_split(order, num_minis):
                    per_step.append(self._shard_optimizer_step(batch, mini))
        self.version += 1
        mean = r_sum / n
        stats = {
            k: sum(s[k] for s in per_step) / len(per_step) if per_step else 0.0 for k in _STEP_STATS
        }
        return (
            stats
            | gap
            | {
                "reward_mean": mean,
                "reward_std": math.sqrt(max(r_sq / n - mean * mean, 0.0)),
                "num_tokens": tokens,
                "num_samples": n,
                "num_local_samples": float(len(samples)),
                "num_skipped_groups": skipped,
                "num_optimizer_steps": float(len(per_step)),
                "version": float(self.version),
                "seconds": time.perf_counter() - start,
                "weights_sum": self.weights_sum(),
            }
        )

    def weights_sum(self) -> float:
        """The sum of every parameter, in float64: equal on every rank after a step (the
        ranks' weights are identical by construction); a cheap check that they are."""
        with torch.no_grad():
            sums = [p.sum(dtype=torch.float64) for p in self.model.parameters()]
            return float(torch.stack(sums).sum()) if sums else 0.0  # one device sync

    def _given_advantages(
        self,
        batch: TrainBatch | None,
        advantages: Sequence[float],
        flat_share: Sequence[float] | None,
        located: Sequence[bool],
    ) -> tuple[TrainBatch | None, Tensor, float]:
        """The batch with the advantages computed where each group completed (step credit
        applied as `make_batch` does), and the rows to train and skipped groups by the
        one rule of `rows_to_train`."""
        share = list(flat_share) if flat_share is not None else [0.0] * len(advantages)
        num = 0 if batch is None else len(batch.rewards)
        if len(advantages) != num or len(share) != num:
            raise ValueError(f"{len(advantages)} advantages, {len(share)} flat shares, {num} rows")
        if batch is not None:
            adv = credit_advantages(
                torch.tensor(list(advantages), dtype=torch.float32),
                torch.tensor(list(located), dtype=torch.bool),
            )
            batch = TrainBatch(
                batch.input_ids, batch.targets, batch.mask, batch.old_logprobs, adv, batch.rewards
            )
        keep, skipped = rows_to_train(share, located, kl_coef=self.kl_coef)
        return batch, torch.tensor(keep, dtype=torch.long), skipped

    def agree(self, is_ok: bool) -> bool:
        """Whether every rank is ok (a collective: every rank must call it)."""
        return float(all_reduce_min(torch.tensor([1.0 if is_ok else 0.0]))) == 1.0

    def _agree_on_policy(self, samples: Sequence[TrainSample]) -> None:
        error: OffPolicyError | None = None
        try:
            self.check_on_policy(samples)
        except OffPolicyError as exc:
            error = exc
        ok = all_reduce_min(torch.tensor([0.0 if error else 1.0]))
        if error is not None:
            raise error
        if float(ok) < 1:
            raise OffPolicyError("another trainer rank refused an off-policy sample")

    def _shard_optimizer_step(self, batch: TrainBatch | None, rows: Tensor) -> dict[str, float]:
        """Local micro-batches weighted by global counts, gradients summed over ranks."""
        local = torch.tensor([0.0, 0.0], dtype=torch.float64)
        if batch is not None and len(rows):
            lengths = batch.mask[rows].sum(dim=-1)
            local[0], local[1] = float(lengths.sum()), float((lengths > 0).sum())
        num_tokens, num_seqs = all_reduce_sum(local).tolist()
        if num_tokens == 0:
            return dict.fromkeys(_STEP_STATS, 0.0)
        self.optimizer.zero_grad(set_to_none=True)
        local_totals = dict.fromkeys(_STEP_STATS, 0.0)
        if batch is not None and len(rows):
            local_totals = self._accumulate(batch, rows, num_tokens, num_seqs)
        totals = torch.tensor([local_totals[k] for k in _STEP_STATS], dtype=torch.float64)
        all_reduce_sum(totals)
        _check_finite_loss(float(totals[0]))  # the same sum on every rank: all fail together
        self._all_reduce_grads()  # every parameter gets a (summed) gradient
        grad_norm = self._clip_and_step()
        out = dict(zip(_STEP_STATS, totals.tolist(), strict=True))
        return out | {"grad_norm": grad_norm}

    def _all_reduce_grads(self) -> None:
        """Sum every parameter's gradient over the ranks in one flat bucket."""
        params = list(self.model.parameters())
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None])
        all_reduce_sum(flat)
        offset = 0
        for p in params:
            assert p.grad is not None
            n = p.grad.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n


def _empty() -> Tensor:
    return torch.zeros(0, dtype=torch.long)
