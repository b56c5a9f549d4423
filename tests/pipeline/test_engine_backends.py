"""A generator drives any engine the registry names, through the chunk-level protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.generator import BACKENDS
from pipeline.rollout.api import Rollout, rollout_config
from tests.actors.chunk_engine import build_chunk_only
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import PromptSpec, SamplingSpec

pytestmark = pytest.mark.anyio

PROMPTS = [PromptSpec(prompt_id=f"q{i}", token_ids=tuple(range(3 + i, 11 + i))) for i in range(3)]
GREEDY = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=24)


async def _rollout(tmp_path: Path, generator: dict[str, Any]) -> list[tuple[int, ...]]:
    config = rollout_config(
        num_generators=2, chunk_size=8, generator=generator, run_dir=str(tmp_path)
    )
    async with Rollout(config, mode="inprocess") as rollout:
        result = await rollout.generate_with_record(PROMPTS, group_size=3, sampling=GREEDY)
    assert all(r.arrival_s > 0 for r in result.record.requests)  # measured, not zero
    assert all(c.weight_version == 0 for c in result.record.chunks)
    return [s.token_ids for g in result.groups for s in g.samples]


async def test_a_chunk_level_backend_gives_the_builtin_engines_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered under its own name, an engine with only `poll` (no drafts) rolls out the
    same greedy samples as the built-in one, chunk by chunk across two generators."""
    monkeypatch.setitem(BACKENDS, "chunk_only", build_chunk_only)
    spec_off = {"mode": "off"}
    builtin = await _rollout(tmp_path / "a", {**TINY_GENERATOR, "spec": spec_off})
    chunked = await _rollout(
        tmp_path / "b", {**TINY_GENERATOR, "backend": "chunk_only", "spec": spec_off}
    )
    assert chunked == builtin and all(len(t) == 24 for t in chunked)
