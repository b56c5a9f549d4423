"""`seer bench engine --quick` runs and writes the documented JSON keys; its HF twin is the
same model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from actors.model import LlamaModel, hf_config, save_hf_folder, to_hf_config
from pipeline.bench import hf_generate
from pipeline.bench.engine import BENCH_MODEL, run


@pytest.mark.slow
@pytest.mark.timeout(300)
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
    # the adaptive budget's depth on the same perfect drafts: lossless too, and it drafts
    assert [r["batch"] for r in data["spec_adaptive"]] == [8]  # quick: batch 8 only
    assert all(r["outputs_match"] is True for r in data["spec_adaptive"])
    assert any(r["drafted_steps"] and r["mean_depth"] >= 1 for r in data["spec_adaptive"])


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


def test_hf_twin_of_a_qwen2_shaped_model_computes_the_same_logits() -> None:
    pytest.importorskip("transformers")
    cfg = dataclasses.replace(
        BENCH_MODEL, num_kv_heads=2, attention_bias=True, tie_embeddings=True, rope_theta=1e6
    )
    model = LlamaModel.random(cfg, seed=0)
    with torch.no_grad():  # random() zeroes biases: give them values
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    hf = hf_generate.hf_twin(model)
    assert type(hf).__name__ == "Qwen2ForCausalLM"  # Llama's bias would bias o_proj too
    ids = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(hf(ids).logits, model(ids), rtol=1e-4, atol=1e-5)


def test_engine_bench_on_a_hugging_face_folder(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    cfg = dataclasses.replace(BENCH_MODEL, hidden=64, num_layers=2, intermediate=128)
    save_hf_folder(LlamaModel.random(cfg, seed=0, std=0.5), tmp_path / "hf")
    result = run(quick=True, model_dir=str(tmp_path / "hf"))
    assert result["shape"] == str(tmp_path / "hf")
    assert result["verify"] == [] and result["spec_grid"] == []  # decode only off "small"
    rows = cast(list[dict[str, Any]], result["decode"])
    assert [r["batch"] for r in rows] == [1, 8, 32]
    # the same weights read by both sides: greedy tokens agree row for row
    assert all(r["same_as_hf"] == r["batch"] for r in rows)
