"""`seer bench engine --quick` runs and writes the documented JSON keys; its HF twin is the
same model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from actors.model import LlamaModel, hf_config, to_hf_config
from pipeline.bench import hf_generate
from pipeline.bench.engine import BENCH_MODEL, run


@pytest.mark.slow
def test_engine_bench_quick_writes_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    result = run(str(path), quick=True)
    data = json.loads(path.read_text())
    assert data.keys() == result.keys()
    assert data["transformers_version"] == hf_generate.version()
    assert [r["batch"] for r in data["decode"]] == [1, 8, 32]
    assert all(r["tokens_per_s"] > 0 for r in data["decode"])
    for r in data["decode"]:  # the ratio divides the two numbers of this run, or is absent
        if data["transformers_version"] is None:
            assert r["hf_generate_tokens_per_s"] is None and r["speedup_over_hf"] is None
        else:
            ratio = r["tokens_per_s"] / r["hf_generate_tokens_per_s"]
            assert r["speedup_over_hf"] == pytest.approx(ratio)
    assert {(r["batch"], r["draft_len"]) for r in data["verify"]} >= {(1, 0), (32, 8)}
    assert [r["batch"] for r in data["spec_speedup"]] == [1, 8, 32]
    # perfect drafts never change a greedy output, and they save verify steps
    assert data["spec_grid"] and all(r["outputs_match"] is True for r in data["spec_grid"])
    assert all(r["steps"] < r["baseline_steps"] for r in data["spec_grid"] if r["draft_len"])


def test_to_hf_config_inverts_hf_config() -> None:
    assert hf_config(to_hf_config(BENCH_MODEL)) == BENCH_MODEL


def test_hf_twin_computes_the_same_logits() -> None:
    pytest.importorskip("transformers")
    model = LlamaModel.random(BENCH_MODEL, seed=0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, BENCH_MODEL.vocab_size, (2, 12), generator=gen)
    with torch.inference_mode():
        ours = model(ids)
        theirs = hf_generate.hf_twin(model)(ids).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)
