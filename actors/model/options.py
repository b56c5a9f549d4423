"""ModelOptions: which policy model a generator or the trainer holds, and its one builder.

Every process that holds the policy (each generator, the trainer) builds it with
`build_model(options)` from the same options, so they start from identical weights: a
Hugging Face folder at `path` (`hf_folder.py`: Llama, Qwen2, Qwen3), a safetensors file
saved by `save_model` (the shape comes from the file), or a random model of the shape
below made from `seed`; in the dtype asked ("auto": the folder's stored dtype, float32 for
the rest) on the device asked. `load_pretrained` is the same loader for callers without
options (`seer serve`, `seer generate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from actors.model.config import ModelConfig
from actors.model.hf_folder import TORCH_DTYPES, StrPath, load_hf_folder
from actors.model.llama import LlamaModel
from actors.model.weights import load_model
from actors.options import ConfigError

DTYPES = ("auto", *TORCH_DTYPES)
Dtype = Literal["auto", "float32", "bfloat16", "float16"]


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """`path`: a Hugging Face model folder (config.json, safetensors, tokenizer) or a
    safetensors file saved by seer ("" = a random model of the shape below). `seed`: the
    random model's seed. `dtype`: the weights' dtype, "auto" (a folder's stored dtype,
    float32 for a seer file or a random model), "float32", "bfloat16" or "float16".
    `device`: where the model, its KV cache and every tensor made for it live, "cpu",
    "cuda" or "cuda:N". A model from `path` has the file's shape; the rest gives a random
    model's. `vocab_size`: tokens in the vocabulary. `hidden`: the hidden width.
    `num_layers`: decoder layers. `num_heads`: attention heads. `num_kv_heads`: key/value
    heads (fewer than `num_heads`: grouped-query attention). `intermediate`: the SwiGLU
    width. `max_context`: the longest sequence, prompt and output, in tokens (a folder's
    model holds the smaller of this and its `max_position_embeddings`)."""

    path: str = ""
    seed: int = 0
    dtype: Dtype = "auto"
    device: str = "cpu"
    vocab_size: int = 259
    hidden: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate: int = 344
    max_context: int = 1024

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(
                f"ModelOptions.dtype must be one of {list(DTYPES)}, got {self.dtype!r}"
            )
        if not is_device_name(self.device):
            raise ConfigError(
                f"ModelOptions.device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}"
            )
        try:
            self.config()
        except ValueError as exc:
            raise ConfigError(f"ModelOptions: {exc}") from None

    def config(self) -> ModelConfig:
        """The shape of a random model (a model loaded from `path` has the file's)."""
        return ModelConfig(
            vocab_size=self.vocab_size,
            hidden=self.hidden,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            intermediate=self.intermediate,
            max_context=self.max_context,
        )


def is_device_name(device: str) -> bool:
    kind, _, index = device.partition(":")
    return (kind == "cpu" and not index) or (kind == "cuda" and (not index or index.isdigit()))


def check_device(device: str) -> torch.device:
    """``device`` as a torch device; a ``ConfigError`` when CUDA is asked and absent."""
    if not is_device_name(device):
        raise ConfigError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    target = torch.device(device)
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asked, but CUDA is not available here")
        if target.index is not None and target.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {device!r} asked, but only {torch.cuda.device_count()} CUDA devices"
            )
    return target


def load_pretrained(
    path: StrPath, *, dtype: str = "auto", device: str = "cpu", max_context: int | None = None
) -> LlamaModel:
    """The model at ``path``: a Hugging Face folder or a seer safetensors file."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    target = check_device(device)
    if Path(path).is_dir():
        return load_hf_folder(path, max_context, dtype=dtype, device=str(target))
    model = load_model(path)
    return model.to(device=target, dtype=TORCH_DTYPES["float32" if dtype == "auto" else dtype])


def build_model(options: ModelOptions) -> LlamaModel:
    """The policy model these options name, in their dtype, on their device."""
    if options.path and Path(options.path).is_dir():
        return load_pretrained(
            options.path,
            dtype=options.dtype,
            device=options.device,
            max_context=options.max_context,
        )
    if options.path:
        return load_pretrained(options.path, dtype=options.dtype, device=options.device)
    dtype = TORCH_DTYPES["float32" if options.dtype == "auto" else options.dtype]
    model = LlamaModel.random(options.config(), seed=options.seed)
    return model.to(device=check_device(options.device), dtype=dtype)
