"""A published state dict written for an SGLang server loads back bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from actors.generator.sglang.weights import is_hf_folder, model_config_of, write_hf_folder
from actors.model import LlamaModel, ModelConfig, load_hf_folder

CFG = ModelConfig(
    vocab_size=50, hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64,
    max_context=64,
)  # fmt: skip


def test_a_state_dict_round_trips_through_an_hf_folder(tmp_path: Path) -> None:
    model = LlamaModel.random(CFG, seed=2)
    folder = write_hf_folder(model.state_dict(), CFG, tmp_path / "v1", eos_token_id=7)
    write_hf_folder(model.state_dict(), CFG, folder)  # rewriting replaces it whole
    assert is_hf_folder(str(folder)) and not (tmp_path / "v1.tmp").exists()
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    loaded = load_hf_folder(folder)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    assert model_config_of(str(folder), CFG) == CFG
    assert model_config_of("", CFG) == CFG


def test_the_folder_names_the_architecture_and_the_dtype_it_holds(tmp_path: Path) -> None:
    cfg = ModelConfig(
        vocab_size=50, hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64,
        max_context=64, model_type="qwen3", qk_norm=True, explicit_head_dim=8,
    )  # fmt: skip
    model = LlamaModel.random(cfg, seed=3).to(torch.bfloat16)
    folder = write_hf_folder(model.state_dict(), cfg, tmp_path / "v2")
    hf = json.loads((folder / "config.json").read_text())
    assert (hf["architectures"], hf["model_type"]) == (["Qwen3ForCausalLM"], "qwen3")
    assert hf["torch_dtype"] == "bfloat16"
    loaded = load_hf_folder(folder)
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert model_config_of(str(folder), cfg) == cfg
