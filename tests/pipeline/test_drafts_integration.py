"""Grouped speculative decoding end to end: real processes, the draft-tree store actor,
the built-in engine on a tiny model. Drafts never change a sample; they do get accepted;
a dead store costs drafts, not samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.drafts.options import SpecConfig
from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.generator.speculator import Speculator
from actors.model import LlamaModel, ModelOptions, save_model
from pipeline.rollout.api import Rollout, rollout_config
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import ActorStats, GetStats, PromptSpec, SamplingSpec

pytestmark = pytest.mark.anyio

TINY: dict[str, Any] = {**TINY_GENERATOR, "kv_budget_tokens": 4096}
PROMPTS = [PromptSpec(prompt_id=f"q{i}", token_ids=tuple(range(3 + i, 12 + i))) for i in range(3)]
VARIANTS = {
    "off": {"spec": {"mode": "off"}},
    "self": {"spec": {"mode": "self", "budget": "fixed"}},
    "group_fixed": {"spec": {"mode": "group", "budget": "fixed"}},
    "group": {"spec": {"mode": "group"}},  # adaptive: drafts only when the profiled steps say so
}


async def _samples(
    tmp_path: Path, variant: dict[str, Any], sampling: SamplingSpec, model_path: str = ""
) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    gen = {**TINY, **variant}
    if model_path:
        gen["model"] = {**TINY["model"], "path": model_path}
    config = rollout_config(num_generators=2, chunk_size=16, generator=gen, run_dir=str(tmp_path))
    async with Rollout(config, mode="local") as rollout:
        result = await rollout.generate_with_record(PROMPTS, 4, sampling)
    return [s.token_ids for g in result.groups for s in g.samples], result.metrics()


def peaked_model(folder: Path) -> str:
    """A random model of the tiny shape with larger weights: its next-token distribution at
    T=1 is peaked (entropy about 0.4 nats, like a trained policy's) where the default random
    model's is nearly uniform over 259 tokens (entropy 5.54 of ln 259 = 5.56). Sampled
    siblings of the uniform one share no text, so no draft could be accepted at T=1 (the
    engine accepts every perfect draft at T=1: tests/actors/test_engine_drafts.py)."""
    path = folder / "peaked.safetensors"
    config = ModelOptions(**TINY["model"]).config()
    save_model(LlamaModel.random(config, seed=0, std=0.5), path)
    return str(path)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
async def test_speculation_never_changes_a_sample(tmp_path: Path, temperature: float) -> None:
    sampling = SamplingSpec(temperature=temperature, seed=11, ignore_eos=True, max_new_tokens=60)
    model_path = peaked_model(tmp_path) if temperature > 0 else ""
    results = {
        name: await _samples(tmp_path, variant, sampling, model_path)
        for name, variant in VARIANTS.items()
    }
    reference, off = results["off"]
    assert off["num_draft_tokens"] == 0 and off["mean_accept_len"] == 1.0
    for name in ("self", "group_fixed", "group"):
        samples, metrics = results[name]
        assert samples == reference, name
        # repeated text: drafts must land (the adaptive budget may find drafting does not
        # pay at T=1 and offer none, which is its job, not a defect)
        if name != "group" or temperature == 0.0:
            assert metrics["num_accepted_tokens"] > 0, name
        if temperature == 0.0:
            assert metrics["mean_accept_len"] > (1.0 if name == "group" else 1.2), name


async def test_a_dead_draft_store_costs_drafts_not_samples(tmp_path: Path) -> None:
    sampling = SamplingSpec(temperature=0.0, seed=3, ignore_eos=True, max_new_tokens=240)
    reference, _ = await _samples(tmp_path, VARIANTS["off"], sampling)
    gen = {**TINY, "spec": {"store_timeout_s": 0.1, "sync_interval_s": 0.01}}
    config = rollout_config(num_generators=2, chunk_size=16, generator=gen, run_dir=str(tmp_path))
    async with Rollout(config, mode="local") as rollout:
        cluster = rollout._cluster()
        store = cluster.status[("drafts", 0)].process
        assert store is not None
        store.kill()
        assert store.wait(10) is not None
        with anyio.fail_after(120):
            result = await rollout.generate_with_record(PROMPTS, 4, sampling)
        stats = [await cluster.call("generator", i, GetStats()) for i in (0, 1)]
    assert [s.token_ids for g in result.groups for s in g.samples] == reference
    failures = [s.counters["num_store_failures"] for s in stats if isinstance(s, ActorStats)]
    assert len(failures) == 2 and sum(failures) >= 1, failures  # it did try, and went on


def test_speculator_around_an_engine_matches_plain_decoding() -> None:
    """In one process: an engine stepped with the speculator's drafts (grouped, adaptive,
    siblings sharing one tree) emits exactly what plain decoding emits, sampled or greedy."""
    model = LlamaModel.random(ModelOptions(**TINY["model"]).config(), seed=0)
    cfg = EngineConfig(max_batch=8, profile=False, num_threads=1)
    prompt = tuple(range(5, 14))

    def run(spec: Speculator | None) -> dict[str, tuple[int, ...]]:
        engine = TorchEngine(model, cfg)
        out: dict[str, tuple[int, ...]] = {}
        for i in range(6):
            params = SamplingParams(temperature=0.0 if i < 3 else 1.0, seed=i, ignore_eos=True)
            engine.add(ChunkRequest(f"r{i}", prompt, 50, params=params))
            if spec is not None:
                spec.start(f"r{i}", "g", 0, prompt, (), is_probe=i == 0)
        while engine.has_work():
            decoding = engine.decoding_request_ids()
            drafts = spec.drafts(decoding) if spec is not None else None
            result = engine.step(drafts)
            if spec is not None:
                spec.observe(result, decoding)
            out.update({c.request_id: c.token_ids for c in result.finished})
        return out

    spec = Speculator(SpecConfig(mode="group"), lambda b, g: 1.0)  # drafting always pays
    assert run(spec) == run(None)
    assert spec.totals["num_accepted_tokens"] > 0 and spec.mean_accept_len > 1.0
