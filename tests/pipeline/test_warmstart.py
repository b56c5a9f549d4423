"""Supervised warm start: masking, caching, determinism, that it learns, its config and
progress bar, and the sampling evaluation."""

from __future__ import annotations

import io
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rich.console import Console

from actors.model import LlamaModel, ModelConfig, load_model
from pipeline.config import ConfigError, build_options
from pipeline.rl.config import RunConfig
from pipeline.rl.report import LiveReport
from pipeline.tasks import Countdown, CountdownConfig, evaluate, sft_batch, sft_loss, warm_start
from pipeline.tasks.countdown import EOS
from pipeline.tasks.warmstart import DEFAULT_STEPS, IGNORE, _lr_scale, warm_start_path

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
    path = warm_start(TASK, TINY, cache_dir=tmp_path, steps=3, progress=calls.append)
    assert path.is_file() and path.parent == tmp_path and path.name.startswith("countdown-")
    assert [(c["step"], c["steps"]) for c in calls] == [(1, 3), (2, 3), (3, 3)]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    mtime = path.stat().st_mtime_ns
    again: list[dict[str, Any]] = []
    start = time.perf_counter()
    assert warm_start(TASK, TINY, cache_dir=tmp_path, steps=3, progress=again.append) == path
    assert time.perf_counter() - start < 0.2
    assert again == [] and path.stat().st_mtime_ns == mtime
    assert load_model(path).config == TINY


def test_cache_key_depends_on_inputs(tmp_path: Path) -> None:
    base = warm_start_path(TASK, TINY, cache_dir=tmp_path)
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, steps=DEFAULT_STEPS) == base
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, seed=1) != base
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, steps=DEFAULT_STEPS + 1) != base
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, batch_size=32) != base
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, lr=1e-2) != base
    assert warm_start_path(Countdown(), TINY, cache_dir=tmp_path) != base


def test_cache_key_does_not_depend_on_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = warm_start_path(TASK, TINY, cache_dir=tmp_path, steps=5)
    later = time.time() + 86_400.0
    monkeypatch.setattr(time, "time", lambda: later)
    monkeypatch.setattr(time, "perf_counter", lambda: later)
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert warm_start_path(TASK, TINY, cache_dir=tmp_path, steps=5) == base


def test_warm_start_is_deterministic_whatever_the_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs in separate cache dirs, the second on a clock that runs 1000 s per reading (a
    very slow machine): same steps, same losses, same weights."""
    quick: list[dict[str, Any]] = []
    a = warm_start(TASK, TINY, cache_dir=tmp_path / "a", steps=6, progress=quick.append)
    clock = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(clock)))
    monkeypatch.setattr(time, "time", lambda: float(next(clock)))
    slow: list[dict[str, Any]] = []
    b = warm_start(TASK, TINY, cache_dir=tmp_path / "b", steps=6, progress=slow.append)
    assert a.name == b.name
    assert [c["step"] for c in slow] == [c["step"] for c in quick] == list(range(1, 7))
    assert [c["loss"] for c in slow] == pytest.approx([c["loss"] for c in quick], rel=1e-6)
    weights_a, weights_b = load_model(a).state_dict(), load_model(b).state_dict()
    assert weights_a.keys() == weights_b.keys()
    for name, tensor in weights_a.items():
        torch.testing.assert_close(weights_b[name], tensor, rtol=1e-6, atol=1e-7, msg=name)


def test_lr_schedule_follows_the_step_count() -> None:
    assert _lr_scale(0, 100) == pytest.approx(1 / 30)  # linear warm-up
    assert _lr_scale(29, 100) == pytest.approx(0.9 * 0.5 * (1 + math.cos(math.pi * 29 / 99)) + 0.1)
    assert _lr_scale(99, 100) == pytest.approx(0.1)  # cosine ends at the floor
    assert _lr_scale(99, 200) > _lr_scale(199, 200)
    scales = [_lr_scale(s, 100) for s in range(30, 100)]
    assert scales == sorted(scales, reverse=True)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        warm_start(TASK, TINY, cache_dir=tmp_path, steps=0)
    small_vocab = ModelConfig(vocab_size=200, hidden=32, num_layers=1, num_heads=2, num_kv_heads=2)
    with pytest.raises(ValueError, match="vocab_size"):
        warm_start(TASK, small_vocab, cache_dir=tmp_path, steps=1)


def test_a_few_steps_lower_the_sft_loss(tmp_path: Path) -> None:
    inputs, targets = _fixed_batch()
    with torch.no_grad():
        before = sft_loss(LlamaModel.random(TINY, seed=0), inputs, targets).item()
    path = warm_start(TASK, TINY, cache_dir=tmp_path, steps=40, lr=1e-2, batch_size=32)
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


def test_a_config_with_the_old_seconds_budget_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"unknown keys \['warm_start_s'\].*'warm_start_steps'"):
        build_options(RunConfig, {"warm_start_s": 60.0}, "run.toml")
    assert build_options(RunConfig, {"warm_start_steps": 0}, "run.toml").warm_start_steps == 0
    with pytest.raises(ValueError, match="warm_start_steps"):
        RunConfig(warm_start_steps=-1)


def test_live_report_shows_warm_start_steps() -> None:
    out = io.StringIO()
    report = LiveReport(Console(file=out, width=120))
    for step in (1, 2, 3):
        report({"warm_start": {"step": step, "steps": 3, "loss": 2.0, "tokens": 9, "lr": 0.1}})
    assert "3/3 steps, loss 2.000" in out.getvalue() and report.warm_bar is None


def test_live_report_rows_fit_the_run_console() -> None:
    """`seer run` prints on a 130-wide console (pipeline/cli/run.py): header and rows are
    one line each (a row that wrapped put its last column on a line of its own)."""
    out = io.StringIO()
    report = LiveReport(Console(file=out, width=130))
    row = {"iteration": 12, "reward_mean": 0.5, "success_rate": 0.5, "rollout_s": 12.5}
    row |= {"train_s": 3.25, "throughput_tok_s": 12345.0, "tail_s": 1.5, "mean_accept_len": 2.5}
    row |= {"output_tokens": 123456, "weight_version": 13, "train_logprob_gap_max": 1.2e-5}
    report(row | {"eval_reward": 0.75})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].split()[-2:] == ["gap", "eval"]
    assert lines[1].split()[-2:] == ["1.2e-05", "0.750"]
