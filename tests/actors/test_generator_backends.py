"""The engine protocol, the backend registry and the one model builder."""

from __future__ import annotations

import pytest
import torch

from actors.generator import (
    BACKENDS,
    Engine,
    GeneratorOptions,
    SpeculativeEngine,
    build_engine,
)
from actors.generator.builtin import TorchEngine
from actors.model import ModelOptions, build_model
from actors.options import ConfigError
from tests.actors.chunk_engine import ChunkOnlyEngine

SMALL = ModelOptions(
    vocab_size=40,
    hidden=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    intermediate=64,
    max_context=64,
    seed=5,
)


def test_one_builder_gives_every_holder_the_same_weights() -> None:
    a, b = build_model(SMALL), build_model(SMALL)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    other = build_model(ModelOptions(**{**SMALL.__dict__, "seed": 6}))
    assert not torch.equal(other.embed_tokens.weight, a.embed_tokens.weight)


def test_dtype_option_builds_the_model_in_that_dtype() -> None:
    model = build_model(ModelOptions(**{**SMALL.__dict__, "dtype": "bfloat16"}))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with pytest.raises(ConfigError, match="dtype must be one of"):
        ModelOptions(dtype="float8")  # type: ignore[arg-type]


def test_backend_registry_builds_the_builtin_engine() -> None:
    engine = build_engine(GeneratorOptions(model=SMALL, max_batch=4))
    assert isinstance(engine, TorchEngine)
    assert isinstance(engine, Engine) and isinstance(engine, SpeculativeEngine)
    assert engine.load().max_running == 4
    assert sorted(BACKENDS) == ["builtin", "sglang"]


def test_a_chunk_level_engine_is_not_speculative() -> None:
    engine = ChunkOnlyEngine(build_engine(GeneratorOptions(model=SMALL)))
    assert isinstance(engine, Engine) and not isinstance(engine, SpeculativeEngine)
