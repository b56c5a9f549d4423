"""ModelOptions: which policy model a generator or the trainer holds, and its one builder.

Every process that holds the policy (each generator, the trainer) builds it with
`build_model(options)` from the same options, so they start from identical weights: the
safetensors at `path` (saved by `save_model`; the shape comes from the file), or a random
model of the shape below made from `seed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from actors.model.config import ModelConfig
from actors.model.llama import LlamaModel
from actors.model.weights import load_model
from actors.options import ConfigError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """`path`: a safetensors file saved by seer or a Hugging Face Llama/Qwen2 folder ("" = a
    random model of the shape below). `seed`: the random model's seed. `dtype`: the
    weights' dtype, "float32" or "bfloat16". A model from `path` has the file's shape; the
    rest gives a random model's. `vocab_size`: tokens in the vocabulary. `hidden`: the hidden width.
    `num_layers`: decoder layers. `num_heads`: attention heads. `num_kv_heads`: key/value
    heads (fewer than `num_heads`: grouped-query attention). `intermediate`: the SwiGLU
    width. `max_context`: the longest sequence, prompt and output, in tokens."""

    path: str = ""
    seed: int = 0
    dtype: Literal["float32", "bfloat16"] = "float32"
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
                f"ModelOptions.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}"
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


def build_model(options: ModelOptions) -> LlamaModel:
    """The policy model these options name, in their dtype."""
    if options.path:
        model = load_model(options.path)
    else:
        model = LlamaModel.random(options.config(), seed=options.seed)
    return model.to(DTYPES[options.dtype])
