"""Training samples and the padded batch the loss consumes.

A ``TrainSample`` is one finished rollout request: prompt tokens, completion tokens, the
rollout's log-probability of each completion token, its reward, its GRPO group and the weight
version that generated it. ``make_batch`` turns samples into right-padded tensors for a
teacher-forced forward pass over ``prompt + completion``:

    sequence  s = prompt + completion                       (length L = P + C)
    input_ids[t] = s[t]       targets[t] = s[t + 1]         t in 0 .. L - 2
    logits at position t predict targets[t], so completion token j (= s[P + j]) is the
    target at t = P - 1 + j; ``mask`` is 1 exactly there and ``old_logprobs[t]`` holds the
    rollout log-probability of that token.

Advantages are computed per ``group_id`` with ``group_advantages`` (population std), over the
samples of that group present in the call. Padding (``pad_id``, mask 0) goes on the right,
which the causal model ignores for earlier positions.

**Loss mask.** A multi-turn episode's completion holds the model's action tokens and the
environment's observation tokens; ``loss_mask`` (one 0/1 per completion token; empty: all 1)
keeps the observation tokens out of ``mask``, so they never get a gradient and never count
in the token means or in the trainer's log-probability gap. Their ``old_logprobs`` are 0.

**Step credit.** A failed sample whose task verifier located its first wrong token
(``error_index`` >= 0, from ``Task.first_error``) trains on that token alone: the tokens
before it were right moves (a negative advantage over the whole answer would push them down
with the mistake), the tokens after it follow from the mistake. Its advantage is its group's
when negative, else -1: a group in which every sample failed has zero group advantage but
still says which tokens were wrong, so it is trained rather than skipped (``GRPOTrainer``).

**Which rows train** is one rule for one rank and several (``rows_to_train``): with no KL
term, a member of a flat group (all rewards equal) whose mistake was not located carries
no gradient and is left out, so its tokens do not dilute the loss; a located member trains.
Each skipped member counts as its share 1/G of a skipped group, so the count of skipped
groups adds up the same whether a group sits on one rank or is spread over several.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from actors.trainer.grpo import group_advantages


@dataclass(frozen=True, slots=True)
class TrainSample:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    old_logprobs: tuple[float, ...]  # one per completion token, from the rollout
    reward: float
    group_id: str
    weight_versions: tuple[int, ...]  # the version of each chunk that generated it
    request_id: str = ""  # for error messages only
    # the completion token a verifier located as the first mistake (-1: none located)
    error_index: int = -1
    # per completion token: 1 trains, 0 never does (observation tokens); empty: all train
    loss_mask: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # msgpack hands lists over: store tuples so samples stay hashable and concatenable
        names = ("prompt_ids", "completion_ids", "old_logprobs", "weight_versions", "loss_mask")
        for name in names:
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.prompt_ids:
            raise ValueError(f"sample {self.name}: empty prompt (nothing to condition on)")
        if not -1 <= self.error_index < len(self.completion_ids):
            raise ValueError(
                f"sample {self.name}: error_index {self.error_index} outside its "
                f"{len(self.completion_ids)} completion tokens"
            )
        if len(self.old_logprobs) != len(self.completion_ids):
            raise ValueError(
                f"sample {self.name}: {len(self.old_logprobs)} old_logprobs for "
                f"{len(self.completion_ids)} completion tokens"
            )
        if self.loss_mask:
            if len(self.loss_mask) != len(self.completion_ids):
                raise ValueError(
                    f"sample {self.name}: loss_mask has {len(self.loss_mask)} entries for "
                    f"{len(self.completion_ids)} completion tokens"
                )
            if not set(self.loss_mask) <= {0, 1}:
                raise ValueError(f"sample {self.name}: loss_mask entries must be 0 or 1")
            if self.error_index >= 0 and not self.loss_mask[self.error_index]:
                raise ValueError(
                    f"sample {self.name}: error_index {self.error_index} is an observation "
                    "token (loss mask 0)"
                )

    @property
    def name(self) -> str:
        return f"{self.request_id or '?'} (group {self.group_id!r})"

    @property
    def num_positions(self) -> int:
        """Length of the teacher-forced input: prompt + completion - 1."""
        return len(self.prompt_ids) + len(self.completion_ids) - 1


@dataclass(frozen=True, slots=True)
class TrainBatch:
    input_ids: Tensor  # (B, T) int64
    targets: Tensor  # (B, T) int64
    mask: Tensor  # (B, T) float32, 1 on completion targets
    old_logprobs: Tensor  # (B, T) float32, 0 where mask is 0
    advantages: Tensor  # (B,) float32
    rewards: Tensor  # (B,) float32

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum().item())

    def to(self, device: torch.device) -> TrainBatch:
        """The same batch on ``device`` (the model's)."""
        return TrainBatch(
            input_ids=self.input_ids.to(device),
            targets=self.targets.to(device),
            mask=self.mask.to(device),
            old_logprobs=self.old_logprobs.to(device),
            advantages=self.advantages.to(device),
            rewards=self.rewards.to(device),
        )

    def select(self, rows: Tensor) -> TrainBatch:
        """The rows ``rows`` (K,), trimmed on the right to their longest valid position."""
        mask = self.mask[rows]  # (K, T)
        valid = mask.any(dim=0).nonzero()
        width = int(valid.max().item()) + 1 if valid.numel() else 1
        return TrainBatch(
            input_ids=self.input_ids[rows, :width],
            targets=self.targets[rows, :width],
            mask=mask[:, :width],
            old_logprobs=self.old_logprobs[rows, :width],
            advantages=self.advantages[rows],
            rewards=self.rewards[rows],
        )


def compute_advantages(samples: Sequence[TrainSample], scale: bool = True) -> Tensor:
    """advantages (B,) in sample order, normalised within each ``group_id``."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, sample in enumerate(samples):
        by_group[sample.group_id].append(i)
    out = torch.zeros(len(samples), dtype=torch.float32)
    for rows in by_group.values():
        rewards = torch.tensor([samples[i].reward for i in rows], dtype=torch.float32)
        out[rows] = group_advantages(rewards, scale=scale)
    return out


def credit_advantages(advantages: Tensor, located: Tensor) -> Tensor:
    """Step credit's advantage: a located mistake (``located`` (B,) bool) trains with its
    group's advantage when negative, else -1 (a flat, all-failed group, or a partial-credit
    reward); the rest keep theirs. advantages (B,) -> (B,), a new tensor."""
    out = advantages.clone()
    out[located & (out >= 0)] = -1.0
    return out


def flat_shares(samples: Sequence[TrainSample]) -> list[float]:
    """Each sample's share of a flat group (1/G for a member of a group of G samples
    whose rewards are all equal, else 0): what the dispatcher sends a rank with each
    group's advantages (``GroupAdvantages.is_flat``)."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, sample in enumerate(samples):
        by_group[sample.group_id].append(i)
    share = [0.0] * len(samples)
    for rows in by_group.values():
        if len({samples[i].reward for i in rows}) < 2:
            for i in rows:
                share[i] = 1.0 / len(rows)
    return share


def rows_to_train(
    flat_share: Sequence[float], located: Sequence[bool], *, kl_coef: float
) -> tuple[list[int], float]:
    """The one rule, for one rank and several, of which rows train (see the module
    docstring): the indices kept, and the skipped groups (sum of the skipped rows' flat
    shares)."""
    if len(flat_share) != len(located):
        raise ValueError(f"{len(flat_share)} flat shares for {len(located)} samples")
    if kl_coef > 0:
        return list(range(len(flat_share))), 0.0
    keep = [i for i, (s, loc) in enumerate(zip(flat_share, located, strict=True)) if loc or s == 0]
    kept = set(keep)
    return keep, float(sum(s for i, s in enumerate(flat_share) if i not in kept))


def make_batch(samples: Sequence[TrainSample], pad_id: int, scale: bool = True) -> TrainBatch:
    """Right-padded (B, T) tensors with T = max(P + C - 1); see the module docstring."""
    if not samples:
        raise ValueError("make_batch needs at least one sample")
    width = max(1, max(s.num_positions for s in samples))
    num = len(samples)
    input_ids = torch.full((num, width), pad_id, dtype=torch.long)
    targets = torch.full((num, width), pad_id, dtype=torch.long)
    mask = torch.zeros((num, width), dtype=torch.float32)
    old = torch.zeros((num, width), dtype=torch.float32)
    for row, sample in enumerate(samples):
        seq = torch.tensor(sample.prompt_ids + sample.completion_ids, dtype=torch.long)
        length = len(seq) - 1
        input_ids[row, :length] = seq[:-1]
        targets[row, :length] = seq[1:]
        start, num_completion = len(sample.prompt_ids) - 1, len(sample.completion_ids)
        mask[row, start : start + num_completion] = (
            torch.tensor(sample.loss_mask, dtype=torch.float32) if sample.loss_mask else 1.0
        )
        old[row, start : start + num_completion] = torch.tensor(
            sample.old_logprobs, dtype=torch.float32
        )
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    for row, sample in enumerate(samples):  # step credit: blame the located mistake alone
        if sample.error_index >= 0:
            at = len(sample.prompt_ids) - 1 + sample.error_index
            mask[row], old[row, :at], old[row, at + 1 :] = 0.0, 0.0, 0.0
            mask[row, at] = 1.0
    located = torch.tensor([s.error_index >= 0 for s in samples], dtype=torch.bool)
    advantages = credit_advantages(compute_advantages(samples, scale), located)
    return TrainBatch(input_ids, targets, mask, old, advantages, rewards)
