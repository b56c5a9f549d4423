"""examples/gpu_check.py on CPU (`--device cpu --dtype float32 --shape tiny`): its JSON has
every figure, the engine and the trainer agree on the generated tokens' log-probabilities
within 1e-4, and a missing CUDA device is a clear message, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from examples import gpu_check


def test_gpu_check_runs_on_cpu_and_the_engine_agrees_with_the_trainer(tmp_path: Path) -> None:
    out = tmp_path / "check.json"
    argv = ["--device", "cpu", "--dtype", "float32", "--shape", "tiny", "--batches", "1,4"]
    argv += ["--new-tokens", "8", "--prompt-len", "8", "--repeats", "1", "--check-batch", "4"]
    assert gpu_check.main([*argv, "--threads", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert (result["device"], result["dtype"], result["model"]["shape"]) == (
        "cpu",
        "float32",
        "tiny",
    )
    assert [row["batch"] for row in result["decode"]] == [1, 4]
    for row in result["decode"]:
        assert row["tokens_per_s"] > 0 and row["hf_generate_tokens_per_s"] > 0
        assert row["speedup_over_hf"] == pytest.approx(
            row["tokens_per_s"] / row["hf_generate_tokens_per_s"]
        )
        assert row["same_tokens"] == 1.0 and row["same_prefix"] == 1.0  # float32: no flips
    train = result["train"]
    assert train["samples"] == 4 and train["tokens"] == 4 * 8  # one group of 4, trained
    assert train["first_step_s"] > 0 and train["second_step_s"] > 0
    for peer in ("trainer", "transformers"):
        gap = result["agreement"][peer]
        assert gap["tokens"] == 4 * 8
        assert gap["max"] < 1e-4 and gap["mean"] <= gap["max"]
        assert -20 < gap["engine_logprob_mean"] < -0.1  # neither near-certain nor absurd
    assert train["step_logprob_gap_max"] == pytest.approx(
        result["agreement"]["trainer"]["max"], abs=1e-6
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here")
def test_gpu_check_without_cuda_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["--out", "/nonexistent/never-written.json"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err
