"""Weights on disk: seer's own safetensors files of a ``LlamaModel``.

``save_model(model, path)`` writes one safetensors file whose metadata carries the
``ModelConfig`` as JSON; ``load_model(path)`` rebuilds the model from it (files written
before a ``ModelConfig`` field existed load with its default). ``load_state_dict`` reads the
tensors only (for a weight swap). Hugging Face folders are read by ``hf_folder.py`` (with
``read_weights``, which takes either form) and written by ``hf_export.py``; ``hf_config`` and
``to_hf_config`` are re-exported here for older imports. Nothing is ever downloaded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from actors.model.config import ModelConfig
from actors.model.hf_config import hf_config as hf_config  # re-exported for older imports
from actors.model.hf_config import to_hf_config as to_hf_config
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


def _unshared_state(model: LlamaModel) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)
    return {k: v.detach().cpu().contiguous() for k, v in state.items()}


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
