"""Supervised warm start: masking, caching, that it learns, and the sampling evaluation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors.model import LlamaModel, ModelConfig, load_model
from pipeline.tasks import Countdown, CountdownConfig, evaluate, sft_batch, sft_loss, warm_start
from pipeline.tasks.countdown import EOS
from pipeline.tasks.warmstart import IGNORE, MAX_SECONDS, warm_start_path

TASK = Countdown(CountdownConfig(max_n=30))
TINY = ModelConfig(
    vocab_size=TASK.vocab_size,
    hidden=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    intermediate=64,
    max_context=64,
)


def _fixed_batch(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(123)
    prompts = TASK.sample_prompts(n, rng)
    return sft_batch(TASK, [(p.token_ids, TASK.sft_example(p, rng)) for p in prompts], 64)


def test_sft_batch_masks_prompt_and_padding() -> None:
    short = ((1, 2, 3), [7, EOS])
    long = ((1, 2), [5, 6, 7, EOS])
    inputs, targets = sft_batch(TASK, [short, long], 64)
    assert inputs.tolist() == [[1, 2, 3, 7, EOS], [1, 2, 5, 6, 7]]
    assert targets.tolist() == [
        [IGNORE, IGNORE, 7, EOS, IGNORE],
        [IGNORE, 5, 6, 7, EOS],
    ]


def test_warm_start_caches(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    path = warm_start(TASK, TINY, cache_dir=tmp_path, seconds=0.3, progress=calls.append)
    assert path.is_file() and path.parent == tmp_path and path.name.startswith("countdown-")
    assert calls and calls[0]["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    mtime = path.stat().st_mtime_ns
    again: list[dict[str, Any]] = []
    start = time.perf_counter()
    assert warm_start(TASK, TINY, cache_dir=tmp_path, seconds=0.3, progress=again.append) == path
    assert time.perf_counter() - start < 0.2
    assert again == [] and path.stat().st_mtime_ns == mtime
    assert load_model(path).config == TINY


def test_cache_key_depends_on_inputs(tmp_path: Path) -> None:
    base = warm_start_path(TASK, TINY, cache_dir=tmp_path)
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, seed=1) != base
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, seconds=10) != base
    assert warm_start_path(Countdown(), TINY, cache_dir=tmp_path) != base
    capped = warm_start_path(TASK, TINY, cache_dir=tmp_path, seconds=MAX_SECONDS)
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, seconds=1e4) == capped


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        warm_start(TASK, TINY, cache_dir=tmp_path, seconds=0)
    small_vocab = ModelConfig(vocab_size=200, hidden=32, num_layers=1, num_heads=2, num_kv_heads=2)
    with pytest.raises(ValueError, match="vocab_size"):
        warm_start(TASK, small_vocab, cache_dir=tmp_path, seconds=1)


def test_a_few_seconds_lower_the_sft_loss(tmp_path: Path) -> None:
    inputs, targets = _fixed_batch()
    with torch.no_grad():
        before = sft_loss(LlamaModel.random(TINY, seed=0), inputs, targets).item()
    path = warm_start(TASK, TINY, cache_dir=tmp_path, seconds=2.0, lr=1e-2, batch_size=32)
    with torch.no_grad():
        after = sft_loss(load_model(path), inputs, targets).item()
    assert before > 5.0  # ~ln(259) at random init
    assert after < before - 1.5, (before, after)


def test_evaluate_samples_groups(tmp_path: Path) -> None:
    model = LlamaModel.random(TINY, seed=0)
    result = evaluate(TASK, model, num_prompts=3, samples=4, seed=0, max_new_tokens=20)
    assert result["num_samples"] == 12
    assert 0.0 <= result["reward_mean"] <= 1.0
    assert 1 <= result["length_p50"] <= result["length_max"] <= 20
    assert sum(result["verdicts"].values()) == 12
    assert result["distinct_group_frac"] == 1.0  # random weights: siblings never agree
    again = evaluate(TASK, model, num_prompts=3, samples=4, seed=0, max_new_tokens=20)
    assert again["length_mean"] == result["length_mean"]  # seeded sampling
