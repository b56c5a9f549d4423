"""Weights on disk: safetensors files of a ``LlamaModel``, and local Hugging Face folders.

``save_model(model, path)`` writes one safetensors file whose metadata carries the
``ModelConfig`` as JSON; ``load_model(path)`` rebuilds the model from it. ``load_state_dict``
reads the tensors only (for a weight swap). ``load_hf_folder(folder)`` reads a local HF
Llama or Qwen2 checkpoint folder (``config.json`` plus ``*.safetensors``): parameter names
lose their ``model.`` prefix, otherwise they already match; ``to_hf_config(cfg)`` gives the
HF config fields of a ``ModelConfig`` (the inverse of ``hf_config``). ``save_hf_folder``
writes the other way: a folder that Hugging Face, SGLang's ``--model-path`` and its
``/update_weights_from_disk`` load (``config.json`` with ``architectures``, HF parameter names
in ``model.safetensors``). ``read_weights(path)`` takes either form (a safetensors file or an
HF folder) and returns a state dict in this model's names. Nothing is ever downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from actors.model.config import ModelConfig
from actors.model.llama import LlamaModel

StrPath = str | PathLike[str]
_CONFIG_KEY = "seer_model_config"
HF_FOLDER = "hf"  # the HF folder inside a trainer checkpoint (what `seer serve --model` serves)


def save_model(model: LlamaModel, path: StrPath, metadata: Mapping[str, str] | None = None) -> None:
    meta = {**(metadata or {}), _CONFIG_KEY: json.dumps(model.config.to_dict())}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(_unshared_state(model), str(path), metadata=meta)


def load_model_config(path: StrPath) -> ModelConfig:
    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata() or {}
    if _CONFIG_KEY not in meta:
        raise ValueError(f"{path} has no {_CONFIG_KEY!r} metadata: not saved by save_model")
    return ModelConfig.from_dict(json.loads(meta[_CONFIG_KEY]))


def load_state_dict(path: StrPath) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def load_model(path: StrPath) -> LlamaModel:
    model = LlamaModel(load_model_config(path))
    load_weights_into(model, load_state_dict(path))
    return model


def load_hf_folder(folder: StrPath, max_context: int | None = None) -> LlamaModel:
    """A ``LlamaModel`` from a local HF Llama/Qwen2 folder (config.json + *.safetensors)."""
    model = LlamaModel(hf_config(read_hf_config(folder), max_context))
    load_weights_into(model, load_hf_state_dict(folder))
    return model


def read_hf_config(folder: StrPath) -> dict[str, Any]:
    config_path = Path(folder) / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: not a Hugging Face model folder")
    config: dict[str, Any] = json.loads(config_path.read_text())
    return config


def load_hf_state_dict(folder: StrPath) -> dict[str, torch.Tensor]:
    """The tensors of an HF folder in this model's names (``model.`` prefix dropped)."""
    root = Path(folder)
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {root}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        for name, tensor in load_file(str(file)).items():
            if "rotary_emb" not in name:  # older checkpoints store inv_freq buffers
                state[name.removeprefix("model.")] = tensor.float()
    return state


def read_weights(path: StrPath) -> dict[str, torch.Tensor]:
    """A state dict from a ``save_model`` safetensors file or an HF folder."""
    if Path(path).is_dir():
        return load_hf_state_dict(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"no weights at {path}: neither a safetensors file nor a folder")
    return load_state_dict(path)


def save_hf_folder(model: LlamaModel, folder: StrPath, *, eos_token_id: int | None = None) -> None:
    """Write ``model`` as a Hugging Face Llama folder: ``config.json`` and
    ``model.safetensors`` with HF names (``model.`` + ours; ``lm_head.weight`` as is, absent
    when tied). ``load_hf_folder`` / ``read_weights`` read it back bit for bit."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    state = {_hf_name(k): v for k, v in _unshared_state(model).items()}
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    config = {**to_hf_config(model.config), "architectures": ["LlamaForCausalLM"]}
    config["torch_dtype"] = dtype
    if eos_token_id is not None:
        config["eos_token_id"] = eos_token_id
    save_file(state, str(root / "model.safetensors"), metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _hf_name(name: str) -> str:
    return name if name.startswith("lm_head.") else f"model.{name}"


def hf_config(hf: Mapping[str, Any], max_context: int | None = None) -> ModelConfig:
    """Map a HF Llama/Qwen2 ``config.json`` onto ``ModelConfig``."""
    model_type = hf.get("model_type", "llama")
    if model_type not in ("llama", "qwen2"):
        raise ValueError(f"unsupported model_type {model_type!r}: only llama and qwen2 load")
    heads = int(hf["num_attention_heads"])
    return ModelConfig(
        vocab_size=int(hf["vocab_size"]),
        hidden=int(hf["hidden_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or heads),
        intermediate=int(hf["intermediate_size"]),
        max_context=int(max_context or hf.get("max_position_embeddings", 2048)),
        rope_theta=float(hf.get("rope_theta", 10000.0)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        attention_bias=bool(hf.get("attention_bias", model_type == "qwen2")),
    )


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
    """The HF Llama ``config.json`` fields of ``cfg``: the inverse of ``hf_config``."""
    return {
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "intermediate_size": cfg.intermediate,
        "max_position_embeddings": cfg.max_context,
        "rope_theta": cfg.rope_theta,
        "rms_norm_eps": cfg.norm_eps,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": cfg.attention_bias,
        "hidden_act": "silu",
    }


def _unshared_state(model: LlamaModel) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)
    return {k: v.detach().contiguous() for k, v in state.items()}


def load_weights_into(model: LlamaModel, state: Mapping[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model``, all or nothing: names and shapes are checked first
    (a tied output head may be absent)."""
    state = dict(state)
    if model.config.tie_embeddings and "embed_tokens.weight" in state:
        state.setdefault("lm_head.weight", state["embed_tokens.weight"])
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"weights do not match the model: missing {missing}, unexpected {unexpected}"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ValueError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the model "
                f"expects {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state, strict=True)
