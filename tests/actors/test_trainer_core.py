"""Trainer core: batch alignment, a step moves log-probs the right way, off-policy refusal,
micro-batching, degenerate groups, checkpoints that resume bit for bit."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from actors.model import LlamaModel, ModelConfig
from actors.trainer import (
    CheckpointError,
    GRPOTrainer,
    OffPolicyError,
    TrainSample,
    TrainStepError,
    load_checkpoint,
    make_batch,
    save_checkpoint,
    token_logprobs,
)

CFG = ModelConfig(
    vocab_size=32, hidden=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate=64,
    max_context=64,
)  # fmt: skip
PROMPT = (1, 2, 3)
COMPLETIONS = ((5, 6, 7, 8), (9, 10), (11, 12, 13), (14,))
REWARDS = (1.0, 0.0, 1.0, 0.0)


def model(seed: int = 0) -> LlamaModel:
    return LlamaModel.random(CFG, seed=seed, std=0.2)


def completion_logprobs(
    m: LlamaModel, prompt: tuple[int, ...], comp: tuple[int, ...]
) -> list[float]:
    """log p(comp[j] | prompt + comp[:j]) by a separate forward per token (no batching)."""
    out = []
    with torch.no_grad():
        for j, token in enumerate(comp):
            logits = m(torch.tensor([prompt + comp[:j]]))[0, -1]  # (V,)
            out.append(float(torch.log_softmax(logits, -1)[token]))
    return out


def group(
    m: LlamaModel, group_id: str = "g", version: int = 0, rewards: tuple[float, ...] = REWARDS
) -> list[TrainSample]:
    return [
        TrainSample(
            prompt_ids=PROMPT,
            completion_ids=comp,
            old_logprobs=tuple(completion_logprobs(m, PROMPT, comp)),
            reward=r,
            group_id=group_id,
            weight_versions=(version,),
            request_id=f"{group_id}-{i}",
        )
        for i, (comp, r) in enumerate(zip(COMPLETIONS, rewards, strict=True))
    ]


def weights(m: LlamaModel) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def assert_weights_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_make_batch_aligns_targets_with_completion() -> None:
    samples = [
        TrainSample((5, 6), (7, 8, 9), (-0.1, -0.2, -0.3), 1.0, "a", (0,)),
        TrainSample((4,), (10,), (-0.5,), 0.0, "b", (0,)),
        TrainSample((4,), (11,), (-0.6,), 0.0, "a", (0,)),
        TrainSample((4,), (12,), (-0.7,), 1.0, "b", (0,)),
    ]
    b = make_batch(samples, pad_id=0)
    assert b.input_ids[0].tolist() == [5, 6, 7, 8]
    assert b.targets[0].tolist() == [6, 7, 8, 9]
    assert b.mask[0].tolist() == [0, 1, 1, 1]  # position 0 predicts 6, still the prompt
    assert b.old_logprobs[0].tolist() == pytest.approx([0.0, -0.1, -0.2, -0.3])
    assert b.input_ids[1].tolist() == [4, 0, 0, 0]
    assert b.targets[1].tolist() == [10, 0, 0, 0]
    assert b.mask[1].tolist() == [1, 0, 0, 0]
    assert b.old_logprobs[1].tolist() == pytest.approx([-0.5, 0, 0, 0])
    assert b.advantages.tolist() == pytest.approx([1, -1, -1, 1], abs=1e-5)  # per group_id
    assert b.num_tokens == 6


def test_step_credit_trains_a_located_mistake_alone() -> None:
    """`error_index` k: the sample's loss covers completion token k alone, with its group's
    advantage when negative, else -1 (a group where every sample failed still learns)."""
    samples = [
        TrainSample((4,), (7, 8, 9), (-0.1, -0.2, -0.3), 0.0, "a", (0,), error_index=1),
        TrainSample((4,), (7, 8, 9), (-0.1, -0.2, -0.3), 1.0, "a", (0,)),
        TrainSample((4,), (7, 8, 9), (-0.1, -0.2, -0.3), 0.0, "b", (0,), error_index=0),
        TrainSample((4,), (7, 8), (-0.1, -0.2), 0.0, "b", (0,)),
    ]
    b = make_batch(samples, pad_id=0)
    assert b.advantages.tolist() == pytest.approx([-1, 1, -1, 0], abs=1e-5)
    assert b.mask.tolist() == [[0, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert b.old_logprobs[0].tolist() == pytest.approx([0.0, -0.2, 0.0])
    group_b = [dataclasses.replace(s, reward=0.0) for s in samples[2:]]
    assert make_batch(group_b, pad_id=0).advantages.tolist() == [-1.0, 0.0]  # flat, located
    with pytest.raises(ValueError, match="error_index 3"):
        TrainSample((4,), (7, 8, 9), (-0.1, -0.2, -0.3), 0.0, "a", (0,), error_index=3)


def test_flat_group_with_a_located_mistake_is_trained() -> None:
    m = model()
    flat = group(m, rewards=(0.0, 0.0, 0.0, 0.0))
    stats = GRPOTrainer(model(), lr=1e-2, pad_id=0).step(flat)
    assert stats["num_skipped_groups"] == 1 and stats["num_optimizer_steps"] == 0
    located = [dataclasses.replace(flat[0], error_index=1), *flat[1:]]
    before = completion_logprobs(m, PROMPT, COMPLETIONS[0])
    stats = GRPOTrainer(m, lr=1e-2, pad_id=0).step(located)
    after = completion_logprobs(m, PROMPT, COMPLETIONS[0])
    # the located member trains on its one token; the others (advantage 0, nothing located)
    # are left out as 3/4 of a skipped group (`rows_to_train`, the ranks' rule too)
    assert stats["num_skipped_groups"] == 0.75 and stats["num_tokens"] == 1
    assert after[1] < before[1]  # the located mistake was pushed down


def test_batched_logprobs_match_token_by_token() -> None:
    m = model()
    samples = group(m)
    b = make_batch(samples, pad_id=0)
    with torch.no_grad():
        lp = token_logprobs(m(b.input_ids), b.targets)  # (B, T)
    for row, s in enumerate(samples):
        got = lp[row][b.mask[row] > 0].tolist()
        assert got == pytest.approx(list(s.old_logprobs), abs=1e-5)


def test_step_moves_logprobs_by_reward() -> None:
    m = model()
    trainer = GRPOTrainer(m, lr=1e-3)
    samples = group(m)
    before = [sum(s.old_logprobs) for s in samples]
    stats = trainer.step(samples)
    after = [sum(completion_logprobs(m, PROMPT, c)) for c in COMPLETIONS]
    for b, a, r in zip(before, after, REWARDS, strict=True):
        assert (a > b) if r > 0 else (a < b), (b, a, r)
    assert trainer.version == 1
    assert stats["num_tokens"] == 10 and stats["reward_mean"] == pytest.approx(0.5)
    assert stats["mean_ratio"] == pytest.approx(1.0, abs=1e-4)  # on-policy first epoch
    assert stats["grad_norm"] > 0


def test_step_reports_the_rollout_logprob_gap_before_updating() -> None:
    m = model()
    samples = group(m)  # old logprobs computed token by token on the same weights
    stats = GRPOTrainer(m, lr=1e-3).step(samples)
    assert 0 <= stats["logprob_gap_mean"] <= stats["logprob_gap_max"] < 1e-5
    shifted = [  # a rollout engine that computed 0.25 nats too low on one token
        dataclasses.replace(s, old_logprobs=(s.old_logprobs[0] - 0.25, *s.old_logprobs[1:]))
        if i == 2 else s
        for i, s in enumerate(group(model()))
    ]  # fmt: skip
    stats = GRPOTrainer(model(), lr=1e-3).step(shifted)
    assert stats["logprob_gap_max"] == pytest.approx(0.25, abs=1e-5)
    assert stats["logprob_gap_mean"] == pytest.approx(0.25 / 10, abs=1e-5)  # 10 tokens


def test_off_policy_sample_refused_before_anything_changes() -> None:
    m = model()
    trainer = GRPOTrainer(m, lr=1e-2)
    samples = group(m)
    stale = group(m, group_id="old", version=1)
    before = weights(m)
    rng = trainer.generator.get_state()
    with pytest.raises(OffPolicyError, match="old-0"):
        trainer.step(samples + stale)
    with pytest.raises(OffPolicyError, match=r"versions \[1\], expected only 0"):
        trainer.step(group(m, version=1))  # samples of a version the trainer does not hold
    mixed = [dataclasses.replace(samples[0], weight_versions=(0, 1, 0)), *samples[1:]]
    with pytest.raises(OffPolicyError, match=r"g-0 .*versions \[0, 1\]"):
        trainer.step(mixed)  # a sample whose chunks mix policies
    assert_weights_equal(before, weights(m))
    assert trainer.version == 0 and not trainer.optimizer.state
    assert torch.equal(rng, trainer.generator.get_state())


def test_flat_groups_are_skipped() -> None:
    m = model()
    trainer = GRPOTrainer(m, lr=1e-2)
    before = weights(m)
    stats = trainer.step(group(m, rewards=(1.0,) * 4))
    assert_weights_equal(before, weights(m))
    assert stats["num_skipped_groups"] == 1 and stats["num_optimizer_steps"] == 0
    assert trainer.version == 1


def test_micro_batches_accumulate_to_the_full_batch_gradient() -> None:
    a, b = model(), model()
    samples = group(a) + group(a, group_id="h", rewards=(0.0, 1.0, 1.0, 0.5))
    GRPOTrainer(a, lr=1e-3, micro_batch_size=16).step(samples)
    GRPOTrainer(b, lr=1e-3, micro_batch_size=3).step(samples)
    for k, v in a.state_dict().items():
        assert torch.allclose(v, b.state_dict()[k], atol=1e-6), k


def _train(trainer: GRPOTrainer, iterations: range) -> None:
    for _ in iterations:
        trainer.step(group(trainer.model, version=trainer.version))


def test_checkpoint_resume_is_bit_identical(tmp_path: Path) -> None:
    def make() -> GRPOTrainer:
        return GRPOTrainer(model(), lr=1e-2, epochs=2, mini_batch_size=2, micro_batch_size=1)

    straight = make()
    _train(straight, range(1))
    save_checkpoint(straight, tmp_path / "ckpt", iteration=1, extra={"note": "x"})
    save_checkpoint(straight, tmp_path / "ckpt", iteration=1, extra={"note": "y"})  # overwrite
    rngs = (
        torch.get_rng_state(),
        np.random.get_state(legacy=False)["state"]["key"].copy(),
        random.getstate(),
    )
    _train(straight, range(1, 3))
    after_rng = torch.rand(3), np.random.rand(3), random.random()

    torch.set_rng_state(rngs[0])
    np.random.seed(123)
    random.seed(123)
    resumed = GRPOTrainer(model(seed=7), lr=1e-2, epochs=2, mini_batch_size=2, micro_batch_size=1)
    info = load_checkpoint(resumed, tmp_path / "ckpt")
    assert info == {"iteration": 1, "version": 1, "extra": {"note": "y"}}
    assert (
        np.array_equal(np.random.get_state(legacy=False)["state"]["key"], rngs[1])
        and random.getstate() == rngs[2]
    )
    _train(resumed, range(1, 3))
    assert_weights_equal(weights(straight.model), weights(resumed.model))
    assert resumed.version == straight.version == 3
    assert torch.equal(torch.rand(3), after_rng[0]) and random.random() == after_rng[2]
    assert np.array_equal(np.random.rand(3), after_rng[1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp leftovers


def test_missing_or_corrupt_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    trainer = GRPOTrainer(model(), lr=1e-2)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(trainer, tmp_path / "nowhere")
    save_checkpoint(trainer, tmp_path / "ckpt", iteration=0)
    before = weights(trainer.model)
    blob = (tmp_path / "ckpt" / "model.safetensors").read_bytes()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(blob[:-8])
    with pytest.raises(CheckpointError, match=r"model\.safetensors is missing or corrupt"):
        load_checkpoint(trainer, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"bad meta\.json"):
        load_checkpoint(trainer, tmp_path / "ckpt")
    assert_weights_equal(before, weights(trainer.model))


def _failing_in_second_mini_batch(trainer: GRPOTrainer) -> list[TrainSample]:
    """`group` with the last sample of the second mini-batch (of two) given an overflowing
    importance ratio: its loss is non-finite after the first optimiser step has run."""
    state = trainer.generator.get_state()
    order = torch.randperm(4, generator=torch.Generator().manual_seed(0).set_state(state))
    samples = group(model())
    bad = int(order[3])
    samples[bad] = dataclasses.replace(
        samples[bad], reward=0.0, old_logprobs=(-1e30,) * len(samples[bad].completion_ids)
    )
    return samples


@pytest.mark.parametrize("restore", [True, False])
def test_a_failing_step_restores_or_leaves_the_trainer_unusable(restore: bool) -> None:
    t = GRPOTrainer(model(), lr=1e-2, mini_batch_size=2, restore_on_failure=restore)
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    with pytest.raises(TrainStepError, match="non-finite loss"):
        t.step(_failing_in_second_mini_batch(t))
    assert t.version == 0
    same = all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())
    assert same == restore  # without the copy, the first mini-batch's step stays applied
    if restore:
        t.step(group(model()))
        assert t.version == 1
    else:
        with pytest.raises(TrainStepError, match="unusable"):
            t.step(group(model()))
