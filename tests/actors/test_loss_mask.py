"""A multi-turn trajectory's loss mask: the trainer never gives a gradient to an observation
token (checked on the gradient of the real trainer's step), and a bad mask is refused."""

from __future__ import annotations

import pytest
import torch

from actors.model import LlamaModel, ModelConfig
from actors.trainer import GRPOTrainer, TrainSample, make_batch
from actors.trainer.wire import train_sample
from transport.messages import TrainSampleSpec

CFG = ModelConfig(
    vocab_size=32, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate=64,
    max_context=64,
)  # fmt: skip
PROMPT = (1, 2, 3)
# action (2 tokens), observation (3 tokens), action (2 tokens)
MASK = (1, 1, 0, 0, 0, 1, 1)
COMPLETIONS = ((5, 6, 20, 21, 22, 7, 8), (9, 10, 23, 24, 25, 11, 12), (13, 14, 20, 21, 22, 15, 4))


def _logprobs(m: LlamaModel, comp: tuple[int, ...]) -> tuple[float, ...]:
    with torch.no_grad():
        logits = m(torch.tensor([PROMPT + comp]))[0]  # (L, V)
    lp = torch.log_softmax(logits, -1)
    out = [float(lp[len(PROMPT) - 1 + j, t]) for j, t in enumerate(comp)]
    return tuple(x if keep else 0.0 for x, keep in zip(out, MASK, strict=True))


def _samples(m: LlamaModel) -> list[TrainSample]:
    return [
        TrainSample(PROMPT, comp, _logprobs(m, comp), r, "g", (0,), f"r{i}", loss_mask=MASK)
        for i, (comp, r) in enumerate(zip(COMPLETIONS, (1.0, 0.0, 0.0), strict=True))
    ]


def test_the_trainer_never_gives_a_gradient_to_an_observation_token() -> None:
    m = LlamaModel.random(CFG, seed=0, std=0.2)
    grads: list[torch.Tensor] = []

    def keep_grad(_module: object, _inputs: object, logits: torch.Tensor) -> None:
        if logits.requires_grad:  # the training forward (not the no-grad log-prob gap)
            logits.register_hook(lambda g: grads.append(g.detach().clone()))

    m.register_forward_hook(keep_grad)
    stats = GRPOTrainer(m, lr=1e-2, pad_id=0).step(_samples(m))
    assert stats["num_tokens"] == 3 * sum(MASK)  # the observation tokens do not count
    assert len(grads) == 1  # one micro-batch, every row
    per_position = grads[0].abs().sum(-1)  # (B, T): gradient reaching each position's logits
    start = len(PROMPT) - 1  # position predicting completion token 0
    action = [start + j for j, keep in enumerate(MASK) if keep]
    observation = [start + j for j, keep in enumerate(MASK) if not keep]
    assert torch.all(per_position[:, observation] == 0), per_position
    assert torch.all(per_position[:, action] > 0), per_position


def test_without_the_mask_observation_tokens_would_train() -> None:
    """The check above can fail: the same samples without a mask do give them gradients."""
    m = LlamaModel.random(CFG, seed=0, std=0.2)
    unmasked = [
        TrainSample(s.prompt_ids, s.completion_ids, s.old_logprobs, s.reward, "g", (0,))
        for s in _samples(m)
    ]
    batch = make_batch(unmasked, pad_id=0)
    assert batch.mask[:, len(PROMPT) - 1 :].sum() == 3 * len(MASK)


def test_the_mask_travels_from_the_wire_and_bad_masks_are_refused() -> None:
    spec = TrainSampleSpec(
        prompt_ids=PROMPT, completion_ids=(5, 6, 7), old_logprobs=(-1.0, 0.0, -1.0),
        reward=1.0, group_id="g", weight_versions=(0,), loss_mask=(1, 0, 1),
    )  # fmt: skip
    sample = train_sample(spec, "r0")
    assert sample.loss_mask == (1, 0, 1)
    assert make_batch([sample], pad_id=0).mask[0].tolist() == [0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match=r"r0.*loss_mask has 2 entries for 3"):
        TrainSample(PROMPT, (5, 6, 7), (0.0,) * 3, 1.0, "g", (0,), "r0", loss_mask=(1, 0))
    with pytest.raises(ValueError, match="0 or 1"):
        TrainSample(PROMPT, (5, 6, 7), (0.0,) * 3, 1.0, "g", (0,), "r0", loss_mask=(1, 2, 1))
    with pytest.raises(ValueError, match="error_index 1 is an observation"):
        TrainSample(
            PROMPT, (5, 6, 7), (0.0,) * 3, 0.0, "g", (0,), error_index=1, loss_mask=(1, 0, 1)
        )
