"""Hugging Face folders against transformers itself: random Llama 3 (llama3 rope scaling),
Qwen2 (tied, q/k/v bias) and Qwen3 (q/k norm, head_dim != hidden / heads) models made with
transformers' own classes load to the same teacher-forced log-probabilities (our forward
and the built-in engine's cached path) and the same greedy tokens; the export loads back
into transformers with the right class, dtype, tokenizer and log-probabilities."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import (
    LlamaModel,
    ModelOptions,
    build_model,
    load_hf_folder,
    load_weights_into,
    read_folder,
    save_hf_folder,
)
from actors.trainer import GRPOTrainer
from actors.trainer.batch import TrainSample
from actors.trainer.checkpoint import save_checkpoint
from tests.hf_folders import make_hf_folder

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.timeout(120)
ARCHS = ("qwen2", "llama3", "qwen3")
CLASSES = {"qwen2": "Qwen2ForCausalLM", "llama3": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}
PROMPT = [5, 17, 42, 99, 123, 7, 250, 31, 64, 200, 11, 3, 77, 150, 88, 9, 260, 45, 19, 101]
NEW = 24  # prompt + new tokens pass original_max_position_embeddings (32) of the llama3 model


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {arch: make_hf_folder(root / arch, arch, seed=i) for i, arch in enumerate(ARCHS)}


def _theirs(folder: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def _logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """(T - 1,) log p(ids[t] | ids[:t]) teacher-forced, float32."""
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(x)
    logits = out if isinstance(out, torch.Tensor) else out.logits
    logp = torch.log_softmax(logits[0, :-1].float(), dim=-1)
    return logp.gather(-1, x[0, 1:, None]).squeeze(-1)


def _greedy_transformers(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def _engine_greedy(model: LlamaModel, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    # small prefill pieces: the prompt goes through chunked prefill, then batched decode
    config = EngineConfig(max_batch=2, max_prefill_tokens=7, profile=False)
    engine = TorchEngine(model, config)
    engine.add(ChunkRequest("r", tuple(prompt), n, params=SamplingParams(temperature=0.0)))
    tokens: list[int] = []
    lps: list[float] = []
    while engine.has_work():
        for delta in engine.step().deltas:
            tokens.extend(delta.token_ids)
            lps.extend(delta.logprobs)
    return tokens, lps


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_and_engine_agree_with_transformers(folders: dict[str, Path], arch: str) -> None:
    theirs, ours = _theirs(folders[arch]), load_hf_folder(folders[arch])
    assert next(ours.parameters()).dtype == torch.float32
    expected = _greedy_transformers(theirs, PROMPT, NEW)
    tokens, engine_lps = _engine_greedy(ours, PROMPT, NEW)
    assert tokens == expected
    seq = PROMPT + expected
    reference = _logprobs(theirs, seq)
    torch.testing.assert_close(_logprobs(ours, seq), reference, atol=1e-4, rtol=0)
    # the engine's cached path: each generated token's logprob, teacher-forced by transformers
    torch.testing.assert_close(
        torch.tensor(engine_lps), reference[len(PROMPT) - 1 :], atol=1e-4, rtol=0
    )


def test_llama3_rope_scaling_is_applied(folders: dict[str, Path]) -> None:
    """The check above can fail: without the llama3 rescaling the log-probs move."""
    model = load_hf_folder(folders["llama3"])
    assert model.config.rope_type == "llama3" and model.config.rope_original_context == 32
    plain = LlamaModel(dataclasses.replace(model.config, rope_type="default"))
    load_weights_into(plain, model.state_dict())
    seq = PROMPT + list(range(20))
    assert (_logprobs(plain, seq) - _logprobs(model, seq)).abs().max() > 1e-2


def test_a_sharded_folder_loads(tmp_path: Path) -> None:
    folder = make_hf_folder(tmp_path / "sharded", "qwen2", shard_size="40KB", tokenizer=False)
    info = read_folder(folder)
    assert (folder / "model.safetensors.index.json").is_file() and len(info.weight_files) > 1
    torch.testing.assert_close(
        _logprobs(load_hf_folder(folder), PROMPT),
        _logprobs(_theirs(folder), PROMPT),
        atol=1e-4,
        rtol=0,
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_the_export_loads_in_transformers(
    folders: dict[str, Path], arch: str, tmp_path: Path
) -> None:
    model = build_model(ModelOptions(path=str(folders[arch])))
    save_hf_folder(model, tmp_path / "out", source=folders[arch])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == [CLASSES[arch]] and config["torch_dtype"] == "float32"
    back = _theirs(tmp_path / "out")
    assert type(back).__name__ == CLASSES[arch] and back.dtype == torch.float32
    torch.testing.assert_close(_logprobs(back, PROMPT), _logprobs(model, PROMPT), atol=1e-4, rtol=0)
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    src = transformers.AutoTokenizer.from_pretrained(str(folders[arch]))
    text = "what is two plus three?"
    assert tok(text)["input_ids"] == src(text)["input_ids"]
    assert tok.chat_template == src.chat_template
    assert read_folder(tmp_path / "out").eos_token_ids == read_folder(folders[arch]).eos_token_ids


def test_the_export_keeps_the_source_context_not_the_runs_cap(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """A run holds a folder at a smaller max_context; its export still says what the model
    can (transformers and SGLang read max_position_embeddings as the model's context)."""
    model = build_model(ModelOptions(path=str(folders["qwen2"]), max_context=64))
    assert model.config.max_context == 64
    save_hf_folder(model, tmp_path / "out", source=folders["qwen2"])
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["max_position_embeddings"] == 256  # the source's (tests/hf_folders.py)
    save_hf_folder(model, tmp_path / "bare")  # no source: the context it was held at
    assert (
        json.loads((tmp_path / "bare" / "config.json").read_text())["max_position_embeddings"] == 64
    )


def test_a_bfloat16_folder_stays_bfloat16_and_exports_as_such(tmp_path: Path) -> None:
    folder = make_hf_folder(tmp_path / "bf16", "qwen3", dtype=torch.bfloat16, tokenizer=False)
    assert read_folder(folder).dtype == "bfloat16"
    model = build_model(ModelOptions(path=str(folder)))  # dtype "auto"
    assert next(model.parameters()).dtype == torch.bfloat16
    as_f32 = build_model(ModelOptions(path=str(folder), dtype="float32"))
    assert next(as_f32.parameters()).dtype == torch.float32
    save_hf_folder(model, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert _theirs(tmp_path / "out").dtype == torch.bfloat16


def test_a_trained_folder_model_checkpoints_to_what_transformers_loads(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """One GRPO step on a Qwen3 folder model (q/k norms train too), then its checkpoint's
    hf/ folder: the right class, the tokenizer, and the trainer's log-probabilities."""
    trainer = GRPOTrainer(build_model(ModelOptions(path=str(folders["qwen3"]))), lr=1e-2)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    tokens, lps = _engine_greedy(trainer.model, PROMPT, 6)
    samples = [
        TrainSample(tuple(PROMPT), tuple(tokens), tuple(lps), 1.0, "g", (0,)),
        TrainSample(tuple(PROMPT[:5]), (3, 4), (-1.0, -1.0), 0.0, "g", (0,)),
    ]
    trainer.step(samples)
    after = trainer.model.state_dict()
    assert not torch.equal(
        after["layers.0.self_attn.q_norm.weight"], before["layers.0.self_attn.q_norm.weight"]
    )
    save_checkpoint(trainer, tmp_path / "ckpt", iteration=1, source=folders["qwen3"])
    hf = tmp_path / "ckpt" / "hf"
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= {
        p.name for p in hf.iterdir()
    }
    assert transformers.AutoTokenizer.from_pretrained(str(hf)).chat_template
    back = _theirs(hf)
    assert type(back).__name__ == "Qwen3ForCausalLM"
    seq = PROMPT + tokens
    torch.testing.assert_close(
        _logprobs(back, seq), _logprobs(trainer.model, seq), atol=1e-4, rtol=0
    )


def test_llama_attention_bias_and_an_untied_qwen3_agree(tmp_path: Path) -> None:
    """Llama's attention_bias puts biases on q/k/v and o; Qwen3 may be untied."""
    for arch, extra in (("llama3", {"attention_bias": True}), ("qwen3", {"tie": False})):
        folder = make_hf_folder(tmp_path / arch, arch, tokenizer=False, **extra)
        ours = load_hf_folder(folder)
        assert ours.config.output_bias == (arch == "llama3")
        assert ours.config.tie_embeddings is False
        torch.testing.assert_close(
            _logprobs(ours, PROMPT + PROMPT), _logprobs(_theirs(folder), PROMPT + PROMPT),
            atol=1e-4, rtol=0,
        )  # fmt: skip
