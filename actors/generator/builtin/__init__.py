"""The built-in engine: `TorchEngine` (continuous batching, resumable chunks, draft
verification) on the in-process `LlamaModel`. It implements `SpeculativeEngine`."""

from __future__ import annotations

from actors.generator.builtin.config import EngineConfig
from actors.generator.builtin.draft_tree import DraftTree, validate_draft
from actors.generator.builtin.profile import StepProfile
from actors.generator.builtin.torch_engine import TorchEngine
from actors.model.options import ModelOptions, build_model


def build_torch_engine(model: ModelOptions, config: EngineConfig) -> TorchEngine:
    """A `TorchEngine` on the model `model` names, with its own `config`."""
    return TorchEngine(build_model(model), config)


__all__ = [
    "DraftTree",
    "EngineConfig",
    "StepProfile",
    "TorchEngine",
    "build_torch_engine",
    "validate_draft",
]
