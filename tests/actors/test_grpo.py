"""GRPO math against hand-computed numbers: advantages, token log-probs, the clipped loss."""

from __future__ import annotations

import math

import pytest
import torch

from actors.trainer import group_advantages, grpo_loss, token_logprobs


def test_advantages_use_population_std() -> None:
    # mean 0.5, population std 0.5 -> +-1
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0]))
    # mean 1, population std sqrt(2/3)
    adv = group_advantages(torch.tensor([0.0, 1.0, 2.0]), eps=0.0)
    s = math.sqrt(1.5)
    assert torch.allclose(adv, torch.tensor([-s, 0.0, s]))


def test_advantages_unscaled_only_centre() -> None:
    adv = group_advantages(torch.tensor([0.0, 1.0, 5.0]), scale=False)
    assert torch.allclose(adv, torch.tensor([-2.0, -1.0, 3.0]))


@pytest.mark.parametrize("rewards", [[0.3, 0.3, 0.3], [7.0], [0.0, 0.0]])
def test_flat_group_gives_exact_zeros(rewards: list[float]) -> None:
    assert torch.equal(group_advantages(torch.tensor(rewards)), torch.zeros(len(rewards)))


def test_token_logprobs_gather_the_target() -> None:
    # softmax([0, ln 3]) = [1/4, 3/4]; softmax([0, 0]) = [1/2, 1/2]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # (1, 2, 2)
    out = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(out, torch.tensor([[math.log(0.75), math.log(0.5)]]))


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """2 sequences of 3 tokens. Seq 0: A=+1, ratios 1, 1.5 (clipped high), 0.5 (not clipped:
    A > 0). Seq 1: A=-2, ratios 0.5 (clipped low), 1.5 (not clipped: A < 0), 3 (masked)."""
    ratios = torch.tensor([[1.0, 1.5, 0.5], [0.5, 1.5, 3.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    new = (old + ratios.log()).requires_grad_(True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    return new, old, torch.tensor([1.0, -2.0]), mask


def test_loss_token_mean_clips_both_sides() -> None:
    new, old, adv, mask = _case()
    loss, stats = grpo_loss(new, old, adv, mask, clip_eps=0.2)
    # per token: -1, -min(1.5, 1.2)=-1.2, -0.5 | -min(-1, -1.6)=1.6, -min(-3, -2.4)=3
    assert loss.item() == pytest.approx((-1.0 - 1.2 - 0.5 + 1.6 + 3.0) / 5)  # 0.38
    assert stats["clip_fraction"] == pytest.approx(2 / 5)
    assert stats["mean_ratio"] == pytest.approx((1 + 1.5 + 0.5 + 0.5 + 1.5) / 5)
    k3 = [0.0, 0.5 - math.log(1.5), -0.5 + math.log(2.0), -0.5 + math.log(2.0), 0.5 - math.log(1.5)]
    assert stats["approx_kl"] == pytest.approx(sum(k3) / 5)
    assert stats["kl_ref"] == 0.0
    torch.autograd.backward(loss)
    # d/dnew of -r*A is -r*A / 5 where unclipped; 0 where clipped or masked
    assert new.grad is not None
    expected = torch.tensor([[-1.0, 0.0, -0.5], [0.0, 3.0, 0.0]]) / 5
    assert torch.allclose(new.grad, expected)


def test_loss_sequence_mean() -> None:
    new, old, adv, mask = _case()
    loss, _ = grpo_loss(new, old, adv, mask, length_norm="sequence")
    # seq 0: (-1 - 1.2 - 0.5) / 3 = -0.9; seq 1: (1.6 + 3) / 2 = 2.3
    assert loss.item() == pytest.approx((-0.9 + 2.3) / 2)


def test_masked_positions_count_for_nothing() -> None:
    new, old, adv, mask = _case()
    loss, stats = grpo_loss(new, old, adv, mask)
    garbage_new = new.detach().clone()
    garbage_new[1, 2] = float("inf")
    garbage_old = old.clone()
    garbage_old[1, 2] = float("-inf")
    loss2, stats2 = grpo_loss(garbage_new, garbage_old, adv, mask)
    assert loss2.item() == pytest.approx(loss.item())
    assert stats2 == pytest.approx(stats)
    # an empty mask is a zero loss, not a NaN
    empty, _ = grpo_loss(new, old, adv, torch.zeros_like(mask))
    assert empty.item() == 0.0


def test_kl_to_reference_k3() -> None:
    new = torch.zeros(1, 3, requires_grad=True)
    ref = torch.tensor([[0.0, math.log(2.0), -math.log(2.0)]])  # delta = ref - new
    mask = torch.ones(1, 3)
    # k3 = e^d - d - 1: 0, 1 - ln 2, ln 2 - 1/2 -> sum 1/2
    loss, stats = grpo_loss(new, new.detach(), torch.zeros(1), mask, kl_coef=0.1, ref_logprobs=ref)
    assert stats["kl_ref"] == pytest.approx(0.5 / 3)
    assert loss.item() == pytest.approx(0.1 * 0.5 / 3)
    torch.autograd.backward(loss)
    # d k3 / d new = 1 - e^d
    assert new.grad is not None
    assert torch.allclose(new.grad, 0.1 * torch.tensor([[0.0, -1.0, 0.5]]) / 3)


def test_kl_coef_needs_reference() -> None:
    new, old, adv, mask = _case()
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(new, old, adv, mask, kl_coef=0.1)
