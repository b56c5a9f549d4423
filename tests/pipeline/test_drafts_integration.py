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
from actors.model import LlamaModel, ModelOptions
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
    # adaptive: drafts when the measured step times say they pay, else explores; here it
    # explores every step, so that greedy drafts land however fast this machine's steps
    # measured (with the default, every 16th step, a pessimistic measurement left a run
    # with 0 accepted tokens once in four suites)
    "group": {"spec": {"mode": "group", "explore_every": 1}},
}


Samples = list[tuple[int, ...]]


def _sampling(temperature: float) -> SamplingSpec:
    return SamplingSpec(temperature=temperature, seed=11, ignore_eos=True, max_new_tokens=60)


async def _both_temperatures(
    tmp_path: Path, variant: dict[str, Any]
) -> dict[float, tuple[Samples, dict[str, Any]]]:
    """One cluster per variant for both temperatures (their start-up is most of the cost):
    a greedy rollout, then two at T=1 with the store keeping history; per temperature, the
    samples and metrics of its last rollout."""
    config = rollout_config(
        num_generators=2,
        chunk_size=16,
        generator={**TINY, **variant},
        run_dir=str(tmp_path),
        drafts={"keep_history": True},
    )
    out = {}
    async with Rollout(config, mode="local") as rollout:
        for temperature, rounds in ((0.0, 1), (1.0, 2)):
            for _ in range(rounds):
                result = await rollout.generate_with_record(PROMPTS, 4, _sampling(temperature))
            samples = [s.token_ids for g in result.groups for s in g.samples]
            out[temperature] = samples, result.metrics()
    return out


@pytest.fixture(scope="module")
def speculation_results(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[float, tuple[Samples, dict[str, Any]]]]:
    """Every variant's samples and metrics at T=0 and T=1, shared by both temperatures."""

    async def run_all() -> dict[str, dict[float, tuple[Samples, dict[str, Any]]]]:
        return {
            name: await _both_temperatures(tmp_path_factory.mktemp(name), variant)
            for name, variant in VARIANTS.items()
        }

    return anyio.run(run_all)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculation_never_changes_a_sample(
    speculation_results: dict[str, dict[float, tuple[Samples, dict[str, Any]]]],
    temperature: float,
) -> None:
    """Greedy: drafts come from text that repeats within and across siblings. T=1: sampled
    text of a random model repeats nothing (siblings run in step, so none is ahead to draft
    from either), so the rollout runs twice with the store keeping history: the second
    round drafts from the first round's responses to the same prompts with the same seeds,
    which are exactly its own samples if speculation is lossless, and must be accepted."""
    results = {name: by_t[temperature] for name, by_t in speculation_results.items()}
    reference, off = results["off"]
    assert off["num_draft_tokens"] == 0 and off["mean_accept_len"] == 1.0
    for name in ("self", "group_fixed", "group"):
        samples, metrics = results[name]
        assert samples == reference, name
        if temperature == 0.0:  # greedy text of a random model repeats: drafts must land
            assert metrics["num_accepted_tokens"] > 0, name
            assert metrics["mean_accept_len"] > (1.0 if name == "group" else 1.2), name
    # at T=1 the history drafts land (self mode has no store, the adaptive budget may not
    # draft at all: only the fixed group budget is bound to use them). The history is the
    # first round's whole responses: a chunk's last tokens reach the store ahead of its
    # result, so ahead of the group's close (they used to wait for the next sync, 500 ms
    # away at the slow pace the sync took before the first decode step: a first round of
    # 0.3 s then left no history, acceptance 1.0, 1 run in 3); a new group is pulled at once
    if temperature > 0:
        assert results["group_fixed"][1]["mean_accept_len"] > 1.2


async def test_history_holds_whole_responses_whatever_the_sync_pace(tmp_path: Path) -> None:
    """A chunk's last tokens go to the store ahead of its result (so ahead of the scheduler's
    `GroupsClosed` for its group), not with the next background sync: with syncs 10 s apart
    (only a new group's pull in between) the first rollout's whole responses still become
    the history the second one drafts from."""
    sampling = SamplingSpec(temperature=1.0, seed=11, ignore_eos=True, max_new_tokens=60)
    spec = {"mode": "group", "budget": "fixed", "sync_interval_s": 10.0}
    config = rollout_config(
        num_generators=2,
        chunk_size=16,
        generator={**TINY, "spec": spec},
        run_dir=str(tmp_path),
        drafts={"keep_history": True},
    )
    async with Rollout(config, mode="local") as rollout:
        with anyio.fail_after(120):
            first = await rollout.generate_with_record(PROMPTS, 4, sampling)
            second = await rollout.generate_with_record(PROMPTS, 4, sampling)
            stats = await rollout._cluster().call("drafts", 0, GetStats())
    samples = [[s.token_ids for g in r.groups for s in g.samples] for r in (first, second)]
    assert samples[0] == samples[1] and all(len(s) == 60 for s in samples[0])  # same seeds
    assert isinstance(stats, ActorStats)
    # every token of both rollouts reached the store, none after its group's history was
    # replaced: appended to an open group, or to a closed one's history ("history_tokens")
    held = stats.counters["appended_tokens"] + stats.counters["history_tokens"]
    assert (held, stats.counters["late"]) == (2 * len(PROMPTS) * 4 * 60, 0), stats.counters
    assert first.metrics()["mean_accept_len"] < 1.2 < second.metrics()["mean_accept_len"]


async def test_a_dead_draft_store_costs_drafts_not_samples(
    tmp_path: Path,
    speculation_results: dict[str, dict[float, tuple[Samples, dict[str, Any]]]],
) -> None:
    """The same greedy rollout as the speculation variants' (its reference: the "off"
    variant's samples, from the module's clusters), with the store killed first."""
    sampling = _sampling(0.0)
    reference, _ = speculation_results["off"][0.0]
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
