"""Packed weights (actors.model.packed): the cached forward on them equals the plain one,
the engine's greedy outputs do not change, and the packs follow every weight change."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actors.generator.builtin.kv_cache import KVCache
from actors.generator.builtin.runner import ModelRunner, Segment
from actors.model import LlamaModel
from actors.model.packed import PackedWeights, supported
from tests.actors.engine_util import TINY, drive, greedy_request, make_engine, reference_greedy

pytestmark = pytest.mark.skipif(not supported(), reason="this torch has no oneDNN linear ops")

# q/k/v biases and a tied head, as Qwen2 has: every packed product is exercised
QWEN_LIKE = dataclasses.replace(TINY, attention_bias=True, tie_embeddings=True)


def _model(seed: int) -> LlamaModel:
    model = LlamaModel.random(QWEN_LIKE, seed=seed, std=0.5).eval()
    with torch.no_grad():  # random() zeroes biases: give them values
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)))
    return model


def _logits(model: LlamaModel, packed: PackedWeights | None) -> torch.Tensor:
    runner = ModelRunner(model, KVCache(model.config, 3, 32), packed)
    prompts = [[1, 2, 3, 4, 5], [7, 8, 9], [30, 31, 0, 2]]
    first = runner.forward(0, [Segment(0, p, list(range(len(p)))) for p in prompts])
    # then a decode step with a 2-token chain on row 0: several rows, uneven lengths
    segments = [
        Segment(5, [6, 11, 12], [5, 6, 7]),
        Segment(3, [10], [3]),
        Segment(4, [3], [4]),
    ]
    return torch.cat([first, runner.forward(0, segments)])


def test_packed_forward_matches_the_plain_modules() -> None:
    model = _model(0)
    packed = PackedWeights(model)
    assert packed.current() is not None
    torch.testing.assert_close(_logits(model, packed), _logits(model, None), rtol=1e-5, atol=1e-5)


def test_engine_greedy_outputs_are_the_same_packed_or_not() -> None:
    model = _model(0)
    prompts = [[(5 * i + j) % 32 for j in range(3 + i % 4)] for i in range(8)]
    requests = [greedy_request(f"r{i}", p, 12) for i, p in enumerate(prompts)]
    runs = [drive(make_engine(model, packed_weights=on), requests) for on in (True, False)]
    for i, prompt in enumerate(prompts):
        assert list(runs[0].tokens(f"r{i}")) == reference_greedy(model, prompt, 12)
        assert runs[0].tokens(f"r{i}") == runs[1].tokens(f"r{i}")


def test_packs_are_rebuilt_when_the_weights_change() -> None:
    model = _model(0)
    packed = PackedWeights(model)
    first = packed.current()
    assert packed.current() is first  # unchanged weights: the same packs
    with torch.no_grad():
        model.blocks[1].mlp.down_proj.weight.mul_(2.0)  # in place: the version moves
    second = packed.current()
    assert second is not first
    torch.testing.assert_close(_logits(model, packed), _logits(model, None), rtol=1e-5, atol=1e-5)


def test_engine_decodes_with_new_weights_after_update_weights() -> None:
    model, other = _model(0), _model(1)
    engine = make_engine(model)
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    requests = [greedy_request(f"r{i}", p, 10) for i, p in enumerate(prompts)]
    before = drive(engine, requests)
    engine.update_weights(other.state_dict(), 1)
    after = drive(engine, requests)
    tokens = [(before.tokens(r), after.tokens(r)) for r in ("r0", "r1")]
    assert any(old != new for old, new in tokens)  # stale packs would keep the old ones
    for i, prompt in enumerate(prompts):
        assert list(before.tokens(f"r{i}")) == reference_greedy(_model(0), prompt, 10)
        assert list(after.tokens(f"r{i}")) == reference_greedy(other, prompt, 10)
