"""A local Hugging Face model folder: what it holds, and the one loader of its weights.

``read_folder(folder)`` checks and describes the folder without reading tensors: a
``FolderInfo`` with the raw ``config.json``, its ``ModelConfig``, the stored dtype
(``torch_dtype`` or ``dtype``), the EOS ids (``generation_config.json`` first, then
``config.json``; an int or a list), the weight files (one ``model.safetensors``, or the
shards ``model.safetensors.index.json`` lists in its ``weight_map``; else every
``*.safetensors``), whether a tokenizer is there and its chat template.
``load_hf_folder(folder, ...)`` builds the ``LlamaModel`` in the dtype and on the device
asked ("auto" keeps the stored dtype). ``read_weights(path)`` gives the state dict of a
folder or of a seer safetensors file, in this model's names. Problems are
``ModelFolderError`` naming the file or field: no ``config.json``, no safetensors, a
shard the index names that is absent, a missing or misshapen tensor, an unsupported
architecture (see ``hf_config.py``). Nothing is ever downloaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from actors.model.config import ModelConfig
from actors.model.hf_config import ModelFolderError, hf_config
from actors.model.llama import LlamaModel
from actors.model.weights import load_state_dict, load_weights_into

StrPath = str | PathLike[str]
INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)
TORCH_DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class FolderInfo:
    """What a model folder holds (see the module docstring); no tensors are read."""

    path: Path
    hf: dict[str, Any]  # config.json as stored
    config: ModelConfig
    dtype: str  # the stored dtype: "float32", "bfloat16" or "float16"
    eos_token_ids: tuple[int, ...]
    weight_files: tuple[Path, ...]
    has_tokenizer: bool
    chat_template: str | None

    @property
    def eos_token_id(self) -> int | None:
        """The first EOS id (what an engine stops on), or None."""
        return self.eos_token_ids[0] if self.eos_token_ids else None


def has_tokenizer(folder: StrPath) -> bool:
    root = Path(folder)
    return (root / "tokenizer.json").is_file() or (root / "tokenizer_config.json").is_file()


def read_folder(folder: StrPath, max_context: int | None = None) -> FolderInfo:
    """Describe ``folder``; ``max_context`` caps the model's context (else the config's)."""
    root = Path(folder)
    config_path = root / "config.json"
    if not root.is_dir():
        raise ModelFolderError(f"{root}: not a folder (a Hugging Face model folder was expected)")
    if not config_path.is_file():
        raise ModelFolderError(f"{config_path} not found: not a Hugging Face model folder")
    hf = _read_json(config_path)
    limit = hf.get("max_position_embeddings")
    context = min(max_context, int(limit)) if max_context and limit else max_context
    config = hf_config(hf, context, source=str(config_path))
    return FolderInfo(
        path=root,
        hf=hf,
        config=config,
        dtype=_stored_dtype(hf, config_path),
        eos_token_ids=_eos_ids(root, hf),
        weight_files=_weight_files(root),
        has_tokenizer=has_tokenizer(root),
        chat_template=_chat_template(root),
    )


def load_hf_folder(
    folder: StrPath,
    max_context: int | None = None,
    *,
    dtype: str = "auto",
    device: str = "cpu",
) -> LlamaModel:
    """A ``LlamaModel`` from a local HF folder, in ``dtype`` ("auto": the stored one) on
    ``device``; ``max_context`` caps the context (else ``max_position_embeddings``)."""
    info = read_folder(folder, max_context)
    target = TORCH_DTYPES[info.dtype if dtype == "auto" else dtype]
    model = LlamaModel(info.config).to(device=device, dtype=target)
    state = load_hf_state_dict(info)
    try:
        load_weights_into(model, state)
    except ValueError as exc:
        raise ModelFolderError(f"{info.path}: {exc}") from None
    return model


def load_hf_state_dict(folder: StrPath | FolderInfo) -> dict[str, torch.Tensor]:
    """The tensors of an HF folder in this model's names (``model.`` prefix dropped), in
    their stored dtype."""
    files = folder.weight_files if isinstance(folder, FolderInfo) else _weight_files(Path(folder))
    state: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in list(handle.keys()):  # safe_open is not iterable
                if "rotary_emb" not in name:  # older checkpoints store inv_freq buffers
                    state[name.removeprefix("model.")] = handle.get_tensor(name)
    return state


def read_weights(path: StrPath) -> dict[str, torch.Tensor]:
    """A state dict from a ``save_model`` safetensors file or an HF folder."""
    if Path(path).is_dir():
        return load_hf_state_dict(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"no weights at {path}: neither a safetensors file nor a folder")
    return load_state_dict(path)


def _weight_files(root: Path) -> tuple[Path, ...]:
    index = root / INDEX
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelFolderError(f"{index}: no weight_map")
        files = tuple(root / name for name in sorted(set(weight_map.values())))
        for file in files:
            if not file.is_file():
                raise ModelFolderError(f"{index} lists {file.name}, which is not in {root}")
        return files
    single = root / "model.safetensors"
    if single.is_file():
        return (single,)
    files = tuple(sorted(root.glob("*.safetensors")))
    if not files:
        raise ModelFolderError(f"no *.safetensors files in {root} (nor {INDEX})")
    return files


def _stored_dtype(hf: dict[str, Any], source: Path) -> str:
    name = hf.get("torch_dtype") or hf.get("dtype") or "float32"
    name = str(name).removeprefix("torch.")
    if name not in TORCH_DTYPES:
        raise ModelFolderError(
            f"{source}: torch_dtype {name!r} is not supported; one of {sorted(TORCH_DTYPES)}"
        )
    return name


def _eos_ids(root: Path, hf: dict[str, Any]) -> tuple[int, ...]:
    generation = root / "generation_config.json"
    value = _read_json(generation).get("eos_token_id") if generation.is_file() else None
    if value is None:
        value = hf.get("eos_token_id")
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ModelFolderError(f"{root}: eos_token_id must be an int or a list of ints: {value!r}")
    return tuple(values)


def _chat_template(root: Path) -> str | None:
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    tokenizer_config = root / "tokenizer_config.json"
    if tokenizer_config.is_file():
        template = _read_json(tokenizer_config).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFolderError(f"{path}: unreadable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFolderError(f"{path}: expected a JSON object")
    return data
