"""What a weight publication must hold, checked before a single bucket is sent.

``WeightSpec.of(options)`` describes the model a generator builds from its ``ModelOptions``
without reading a tensor: a random model's shape, a seer safetensors file's metadata or a
Hugging Face folder's ``config.json`` (the same sources ``build_model`` reads), built on
the meta device. ``check_weights(state, spec)`` raises ``WeightsError`` naming the first
tensor that is missing, unexpected, not a tensor, misshapen, or of a dtype the model
cannot hold. A tensor in another floating dtype than the model's is allowed: the
generator casts it on load (a float32 trainer publishing to bfloat16 generators).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from actors.model.config import ModelConfig
from actors.model.hf_folder import TORCH_DTYPES, read_folder
from actors.model.llama import LlamaModel
from actors.model.options import ModelOptions
from actors.model.weights import load_model_config

# what a published tensor may be: the generator casts any of them to its own dtype
FLOAT_DTYPES = frozenset(TORCH_DTYPES.values())


class WeightsError(ValueError):
    """A publication that does not fit the model (names, shapes, dtypes) or its version
    does not rise; raised before anything is sent."""


@dataclass(frozen=True)
class WeightSpec:
    """The names, shapes and dtype of a model's weights. ``optional``: names that may be
    left out (a tied output head, which the embedding fills)."""

    shapes: Mapping[str, tuple[int, ...]]
    dtype: torch.dtype
    optional: frozenset[str] = frozenset()

    @classmethod
    def of_config(cls, config: ModelConfig, dtype: torch.dtype) -> WeightSpec:
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            state = LlamaModel(config).state_dict()
        optional = frozenset({"lm_head.weight"} if config.tie_embeddings else set())
        return cls({k: tuple(v.shape) for k, v in state.items()}, dtype, optional)

    @classmethod
    def of(cls, options: ModelOptions) -> WeightSpec:
        """The spec of the model ``build_model(options)`` builds (no tensor is read)."""
        return cls.of_config(*model_shape(options))


def model_shape(options: ModelOptions) -> tuple[ModelConfig, torch.dtype]:
    """The config and dtype of the model ``build_model(options)`` builds, read from its
    source without reading a tensor (``ModelFolderError`` or ``ValueError`` when the file
    or folder at ``options.path`` cannot be read)."""
    wanted = None if options.dtype == "auto" else TORCH_DTYPES[options.dtype]
    path = options.path
    if path and Path(path).is_dir():
        info = read_folder(path, options.max_context)
        return info.config, wanted or TORCH_DTYPES[info.dtype]
    config = load_model_config(path) if path else options.config()
    return config, wanted or torch.float32


def check_weights(state: Mapping[str, object], spec: WeightSpec) -> None:
    """``WeightsError`` naming the first tensor of ``state`` that does not fit ``spec``."""
    missing = sorted(set(spec.shapes) - set(state) - spec.optional)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise WeightsError(f"weights miss tensor {missing[0]!r}{more}: the model has it")
    for name, tensor in state.items():
        if name not in spec.shapes:
            raise WeightsError(f"weights have tensor {name!r}, which the model does not have")
        if not isinstance(tensor, torch.Tensor):
            kind = type(tensor).__name__
            raise WeightsError(f"weight {name!r} is a {kind}, not a torch.Tensor")
        expected = spec.shapes[name]
        if tuple(tensor.shape) != expected:
            raise WeightsError(
                f"weight {name!r} has shape {tuple(tensor.shape)}, the model expects {expected}"
            )
        if tensor.dtype not in FLOAT_DTYPES:
            names = ", ".join(sorted(str(d).removeprefix("torch.") for d in FLOAT_DTYPES))
            raise WeightsError(
                f"weight {name!r} has dtype {str(tensor.dtype).removeprefix('torch.')}; the "
                f"model holds {str(spec.dtype).removeprefix('torch.')} (accepted: {names})"
            )
