"""The built-in engine: `TorchEngine` (continuous batching, resumable chunks, draft
verification) on the in-process `LlamaModel`. It implements `SpeculativeEngine`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.generator.builtin.config import EngineConfig
from actors.generator.builtin.draft_tree import DraftTree, validate_draft
from actors.generator.builtin.profile import StepProfile
from actors.generator.builtin.torch_engine import TorchEngine
from actors.model.options import build_model

if TYPE_CHECKING:
    from actors.generator.options import GeneratorOptions


def build_torch_engine(options: GeneratorOptions) -> TorchEngine:
    """A `TorchEngine` on the model `options.model` names, with the options' settings."""
    config = EngineConfig(
        max_batch=options.max_batch,
        kv_budget_tokens=options.kv_budget_tokens,
        max_prefill_tokens=options.max_prefill_tokens,
        num_threads=options.num_threads,
        eos_token_id=options.eos_token_id,
        profile=options.profile,
        parked_eviction=options.parked_eviction,
    )
    return TorchEngine(build_model(options.model), config)


__all__ = [
    "DraftTree",
    "EngineConfig",
    "StepProfile",
    "TorchEngine",
    "build_torch_engine",
    "validate_draft",
]
