"""Hugging Face checkpoints both ways: what the trainer saves (a checkpoint's hf/ folder) is
what Hugging Face and SGLang load, and the engine reads it back to identical logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import (
    LlamaModel,
    ModelConfig,
    load_hf_folder,
    read_weights,
    save_hf_folder,
    save_model,
)
from actors.model.weights import HF_FOLDER
from actors.trainer import GRPOTrainer
from actors.trainer.checkpoint import save_checkpoint

pytestmark = pytest.mark.timeout(120)
CFG = ModelConfig(
    vocab_size=259, hidden=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate=128,
    max_context=128,
)  # fmt: skip
IDS = torch.tensor([[257, 1, 2, 3, 4, 5, 6, 7]])


def _logits(model: LlamaModel) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS)


@pytest.mark.parametrize("tied", [False, True])
def test_save_hf_folder_round_trips_to_identical_logits(tmp_path: Path, tied: bool) -> None:
    cfg = ModelConfig(**{**CFG.to_dict(), "tie_embeddings": tied})
    model = LlamaModel.random(cfg, seed=3)
    save_hf_folder(model, tmp_path, eos_token_id=258)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["eos_token_id"] == 258
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert "model.embed_tokens.weight" in names and "model.norm.weight" in names
    assert ("lm_head.weight" in names) is not tied  # HF leaves a tied head out
    loaded = load_hf_folder(tmp_path)
    assert loaded.config == cfg
    assert torch.equal(_logits(loaded), _logits(model))


def test_transformers_loads_the_folder_to_the_same_logits(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")  # a dev dependency: present in CI
    model = LlamaModel.random(CFG, seed=4)
    save_hf_folder(model, tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path)).eval()
    with torch.no_grad():
        theirs = hf(IDS).logits
    torch.testing.assert_close(theirs, _logits(model), atol=1e-5, rtol=1e-4)


def test_read_weights_takes_a_file_or_a_folder(tmp_path: Path) -> None:
    model = LlamaModel.random(CFG, seed=5)
    save_model(model, tmp_path / "m.safetensors")
    save_hf_folder(model, tmp_path / "hf")
    a, b = read_weights(tmp_path / "m.safetensors"), read_weights(tmp_path / "hf")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(FileNotFoundError):
        read_weights(tmp_path / "missing")


def test_a_checkpoint_holds_an_hf_folder_the_engine_serves(tmp_path: Path) -> None:
    trainer = GRPOTrainer(LlamaModel.random(CFG, seed=6), lr=1e-3)
    save_checkpoint(trainer, tmp_path / "ckpt", iteration=1)
    folder = tmp_path / "ckpt" / HF_FOLDER
    assert torch.equal(_logits(load_hf_folder(folder)), _logits(trainer.model))
    engine = TorchEngine(LlamaModel.random(CFG, seed=0), EngineConfig(profile=False))
    engine.update_weights(read_weights(folder), version=1)  # what /update_weights_from_disk does
    assert torch.equal(_logits(engine.model), _logits(trainer.model))
    greedy = SamplingParams(temperature=0.0)
    engine.add(ChunkRequest("r", (257, 9, 8), 6, params=greedy))
    served: list[int] = []
    while engine.has_work():
        for delta in engine.poll().deltas:
            served.extend(delta.token_ids)
    reference = TorchEngine(trainer.model, EngineConfig(profile=False))
    reference.add(ChunkRequest("r", (257, 9, 8), 6, params=greedy))
    expected: list[int] = []
    while reference.has_work():
        for delta in reference.poll().deltas:
            expected.extend(delta.token_ids)
    assert served == expected and len(served) == 6
