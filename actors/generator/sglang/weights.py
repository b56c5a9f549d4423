"""Weights for an SGLang server: a Hugging Face folder (Llama, Qwen2, Qwen3) it can load.

SGLang loads weights from disk (`--model-path`, `/update_weights_from_disk`), in Hugging
Face format: `config.json` plus safetensors with HF parameter names (ours without the
`model.` prefix). The trainer publishes a state dict to each generator; the SGLang engine
writes it here and points its server at the folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from actors.model.config import ModelConfig
from actors.model.weights import hf_config, load_model_config, to_hf_config


def write_hf_folder(
    state: Mapping[str, torch.Tensor],
    config: ModelConfig,
    folder: str | Path,
    eos_token_id: int | None = None,
) -> Path:
    """`folder` as an HF checkpoint of `state` (its architecture's name, its dtype) (the layout of
    `actors.model.save_hf_folder`, from a state dict rather than a model; written under a
    temporary name first, so a reader never sees half a folder)."""
    root = Path(folder)
    tmp = root.with_name(root.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    dtypes = {str(t.dtype).removeprefix("torch.") for t in state.values()}
    # the architecture the model is and the dtype it holds: SGLang's "auto" serves a float32
    # label in float16 on GPUs, so the label must say what the trainer trained
    hf = {**to_hf_config(config), "torch_dtype": dtypes.pop() if len(dtypes) == 1 else "float32"}
    if eos_token_id is not None:
        hf["eos_token_id"] = eos_token_id
    (tmp / "config.json").write_text(json.dumps(hf, indent=2))
    save_file(hf_tensors(state, config), str(tmp / "model.safetensors"))
    if root.exists():
        for f in root.iterdir():
            f.unlink()
        root.rmdir()
    tmp.rename(root)
    return root


def hf_tensors(state: Mapping[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """`state` under Hugging Face parameter names (`model.` prefix; a tied output head is
    left out), contiguous: what an HF folder holds and what SGLang's loaders expect."""
    return {
        (name if name == "lm_head.weight" else f"model.{name}"): t.detach().contiguous()
        for name, t in state.items()
        if not (config.tie_embeddings and name == "lm_head.weight")
    }


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def has_tokenizer(path: str) -> bool:
    """Whether the folder at `path` holds tokenizer files (SGLang loads its tokenizer
    from there unless told `--skip-tokenizer-init`)."""
    return bool(path) and any((Path(path) / name).is_file() for name in TOKENIZER_FILES)


def is_hf_folder(path: str) -> bool:
    return bool(path) and (Path(path) / "config.json").is_file()


def model_config_of(path: str, fallback: ModelConfig) -> ModelConfig:
    """The shape of the model at `path` (an HF folder or our safetensors file), else
    `fallback` (a random model's shape)."""
    if is_hf_folder(path):
        hf = json.loads((Path(path) / "config.json").read_text())
        return hf_config(hf, fallback.max_context if "max_position_embeddings" not in hf else None)
    if path:
        return load_model_config(path)
    return fallback
