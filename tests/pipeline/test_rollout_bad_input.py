"""Bad input through the library API, as a new user would try it (issue 34 part 4).

Two generators of the tiny model, in this event loop (`mode="inprocess"`) or as real
processes where a test kills them. Before the fixes: a
negative token id killed every generator; a prompt longer than the context or temperature
-1 came back as 0-token samples with the reason only in a log; an empty prompt list failed
in an actor; a misshapen state dict returned normally while both generators died on it,
and a version could go backwards; with no generator alive `generate` waited for its hour;
after a cancelled `generate` every later call failed with "rollout r1 still running".
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch

from actors.model import LlamaModel, ModelOptions
from actors.model.publish import publish_weights
from pipeline.rollout import (
    GeneratorsLost,
    InvalidPromptError,
    InvalidSamplingError,
    Rollout,
    RolloutInputError,
    WeightsError,
    WeightsRefused,
    rollout_config,
)
from pipeline.rollout.checks import GeneratorModel, prompt_specs
from tests.pipeline.tiny import TINY_GENERATOR, TINY_MODEL
from transport.messages import (
    ActorStats,
    GetLoad,
    GetStats,
    LoadInfo,
    LoadReport,
    PromptBatch,
    PromptSpec,
    SamplingSpec,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SAMPLING = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=6)
VOCAB = 259  # ModelOptions' default vocabulary (the tiny model keeps it)


def _rollout(
    tmp_path: Path, mode: Any = "inprocess", generator: Any = None, **kwargs: Any
) -> Rollout:
    """Two generators of the tiny model; in this event loop unless a test kills processes."""
    gen = {**TINY_GENERATOR, **(generator or {})}
    config = rollout_config(num_generators=2, generator=gen, run_dir=str(tmp_path))
    return Rollout(config, mode=mode, **kwargs)


def _state(seed: int) -> dict[str, torch.Tensor]:
    return LlamaModel.random(ModelOptions(**TINY_MODEL).config(), seed=seed).state_dict()


P, S, R = InvalidPromptError, InvalidSamplingError, RolloutInputError
Q1, Q2 = PromptSpec(prompt_id="q", token_ids=(1,)), PromptSpec(prompt_id="q", token_ids=(2,))
BAD_PROMPTS: list[tuple[Any, int, SamplingSpec, type[Exception], str]] = [
    # prompts, group_size, sampling, error, what its message names
    ([[1, -3, 4]], 2, SAMPLING, P, "prompt 0 ('p0'): token_ids[1] = -3"),
    ([[1, 2], [5, VOCAB]], 2, SAMPLING, P, f"prompt 1 ('p1'): token_ids[1] = {VOCAB}"),
    ([[1] * 300], 2, SAMPLING, P, "token_ids has 300 tokens; the generators' context holds 256"),
    ([[1, 2.5]], 2, SAMPLING, P, "token_ids[1] is 2.5"),
    ([PromptSpec(prompt_id="q", token_ids=())], 2, SAMPLING, P, "prompt 0 ('q'): token_ids is"),
    ([Q1, Q2], 2, SAMPLING, P, "prompt 1 ('q'): prompt_id repeats"),
    ([[1, 2]], 2, SamplingSpec(temperature=-1), S, "SamplingSpec.temperature"),
    ([[1, 2]], 2, SamplingSpec(temperature=float("nan")), S, "SamplingSpec.temperature"),
    ([[1, 2]], 2, SamplingSpec(top_p=0.0), S, "SamplingSpec.top_p"),
    ([[1, 2]], 2, SamplingSpec(top_k=-1), S, "SamplingSpec.top_k"),
    ([[1, 2]], 2, SamplingSpec(max_new_tokens=0), S, "SamplingSpec.max_new_tokens"),
    ([[1, 2]], 2, SamplingSpec(stop_token_ids=(-1,)), S, "SamplingSpec.stop_token_ids"),
    ([], 2, SAMPLING, R, "prompts is empty"),
    ([[1, 2]], 0, SAMPLING, R, "group_size must be an int >= 1, got 0"),
]


async def test_bad_prompts_and_sampling_fail_before_sending_and_the_next_call_runs(
    tmp_path: Path,
) -> None:
    async with _rollout(tmp_path) as rollout:
        for prompts, group_size, sampling, error, named in BAD_PROMPTS:
            start = time.monotonic()
            with pytest.raises(error) as caught:
                await rollout.generate(prompts, group_size, sampling)
            assert named in str(caught.value), str(caught.value)
            assert time.monotonic() - start < 5  # refused here, not after a rollout
        groups = await rollout.generate([[1, 2, 3]], 2, SAMPLING)
        assert [len(s.token_ids) for s in groups[0].samples] == [6, 6]


async def test_a_generator_refuses_a_bad_request_as_an_error_sample_and_keeps_serving(
    tmp_path: Path,
) -> None:
    # past the driver's checks (the splitter called directly, as another driver could):
    # the generator refuses the request; the sample carries the reason; nobody dies
    async with _rollout(tmp_path, timeout_s=60) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        batch = PromptBatch(
            rollout_id="raw",
            prompts=(
                PromptSpec(prompt_id="neg", token_ids=(1, -3, 4)),
                PromptSpec(prompt_id="ok", token_ids=(1, 2, 3)),
            ),
            group_size=2,
            sampling=SAMPLING,
        )
        failed_before = cluster.status[("scheduler", 0)].num_failed
        await cluster.call("splitter", 0, batch, timeout=30)
        result = await rollout._await_result(cluster, "raw", failed_before)
        by_prompt = {s.prompt_id: s for s in result.samples}
        bad = by_prompt["neg"]
        assert bad.finish_reason == "error" and bad.token_ids == ()
        assert "TokenOutOfVocabError" in bad.error and "-3" in bad.error, bad.error
        good = by_prompt["ok"]
        assert good.finish_reason == "length" and good.error == ""
        groups = await rollout.generate([[1, 2, 3]], 2, SAMPLING)  # both still serve
        assert all(s.finish_reason == "length" for s in groups[0].samples)
        for index in range(2):
            assert not cluster.trouble("generator", index, 10.0)


async def test_update_weights_checks_names_shapes_dtypes_and_version_before_sending(
    tmp_path: Path,
) -> None:
    good = _state(seed=1)
    name = "layers.0.self_attn.q_proj.weight"
    async with _rollout(tmp_path) as rollout:
        cases: list[tuple[dict[str, Any], int, str]] = [
            ({**good, name: torch.zeros(3, 3)}, 1, f"weight {name!r} has shape (3, 3)"),
            ({k: v for k, v in good.items() if k != name}, 1, f"weights miss tensor {name!r}"),
            ({**good, "extra.weight": torch.zeros(1)}, 1, "tensor 'extra.weight'"),
            ({**good, name: good[name].to(torch.int32)}, 1, f"weight {name!r} has dtype int32"),
            ({**good, name: good[name].tolist()}, 1, f"weight {name!r} is a list"),
            (good, -1, "weights version must be an int >= 0"),
            (good, 0, "weights version 0 does not rise: the generators hold version 0"),
        ]
        for state, version, named in cases:
            with pytest.raises(WeightsError) as caught:
                await rollout.update_weights(state, version)
            assert named in str(caught.value), str(caught.value)
        await rollout.update_weights(good, version=2)
        with pytest.raises(WeightsError, match=r"version 1 does not rise: .* hold version 2"):
            await rollout.update_weights(_state(seed=3), version=1)
        groups = await rollout.generate([[5, 6, 7]], 2, SAMPLING)
        assert {s.weight_versions for s in groups[0].samples} == {(2,)}


async def test_a_publication_the_generators_cannot_load_is_refused_and_the_old_weights_serve(
    tmp_path: Path,
) -> None:
    async with _rollout(tmp_path) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        await rollout.update_weights(_state(seed=1), version=1)
        before = await rollout.generate([[5, 6, 7]], 2, SAMPLING)
        bad = {**_state(seed=2), "layers.0.mlp.up_proj.weight": torch.zeros(2, 2)}
        # past the driver's check (published as a trainer would): each generator refuses it
        with pytest.raises(WeightsRefused, match=r"generator 0: .*WeightLoadError.*up_proj"):
            await publish_weights(cluster.mailbox, bad, 2, num_generators=2)
        after = await rollout.generate([[5, 6, 7]], 2, SAMPLING)
        assert {s.weight_versions for s in after[0].samples} == {(1,)}
        assert after[0].samples[0].token_ids == before[0].samples[0].token_ids
        await rollout.update_weights(_state(seed=2), version=2)  # the next one loads
        again = await rollout.generate([[5, 6, 7]], 2, SAMPLING)
        assert {s.weight_versions for s in again[0].samples} == {(2,)}


async def test_a_cancelled_generate_frees_the_rollout_for_the_next_call(tmp_path: Path) -> None:
    long = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=240)
    async with _rollout(tmp_path) as rollout:
        with anyio.move_on_after(1.0) as scope:
            await rollout.generate([[1, 2, 3]] * 8, 4, long)
        assert scope.cancelled_caught
        with anyio.fail_after(60):
            groups = await rollout.generate([[4, 5, 6]], 2, SAMPLING)
        assert [len(s.token_ids) for s in groups[0].samples] == [6, 6]


async def test_a_cancelled_generate_aborts_its_chunks_in_the_engines(tmp_path: Path) -> None:
    """Chunks of a cancelled rollout running in a generator's engine are aborted there at
    the rollout's end (before: they ran to their end, holding the engine's slots)."""
    gen = {**TINY_GENERATOR, "spec": {"mode": "off"}}
    config = rollout_config(num_generators=2, generator=gen, chunk_size=240, run_dir=str(tmp_path))
    long = SamplingSpec(temperature=0.0, ignore_eos=True, max_new_tokens=240)
    async with Rollout(config, mode="inprocess") as rollout:
        cluster = rollout.cluster
        assert cluster is not None

        async def loads() -> list[LoadInfo]:
            replies = [await cluster.call("generator", i, GetLoad()) for i in range(2)]
            return [r.load for r in replies if isinstance(r, LoadReport)]

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(rollout.generate, [[1, 2, 3]] * 8, 4, long)
                while sum(load.num_running for load in await loads()) < 8:
                    await anyio.sleep(0.005)
                tg.cancel_scope.cancel()  # every chunk is in an engine, 240 tokens long
            while any(load.num_running for load in await loads()):
                await anyio.sleep(0.01)
        generated = sum(load.num_generated_tokens for load in await loads())
        cancelled = 0.0
        for i in range(2):
            stats = await cluster.call("generator", i, GetStats())
            assert isinstance(stats, ActorStats)
            cancelled += stats.counters.get("num_cancelled_chunks", 0)
        assert cancelled > 0
        assert generated < 32 * 240  # not run to their end
        groups = await rollout.generate([[4, 5, 6]], 2, SAMPLING)  # the engines serve on
        assert [len(s.token_ids) for s in groups[0].samples] == [6, 6]
    print(f"{cancelled:.0f} chunks aborted; {generated} of their {32 * 240} tokens made")


async def test_generate_fails_within_seconds_when_no_generator_is_alive(tmp_path: Path) -> None:
    no_store = {"spec": {"mode": "off"}}  # fewer processes to start
    async with _rollout(tmp_path, "local", no_store, timeout_s=60) as rollout:
        cluster = rollout.cluster
        assert cluster is not None
        await rollout.generate([[1, 2, 3]], 2, SAMPLING)
        for index in range(2):
            process = cluster.status[("generator", index)].process
            assert process is not None
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        start = time.monotonic()
        with anyio.fail_after(30), pytest.raises(GeneratorsLost) as caught:
            await rollout.generate([[1, 2, 3]], 2, SAMPLING)
        assert time.monotonic() - start < 10
        assert "generator-0 exited with code -9" in str(caught.value)
        assert "generator-1 exited with code -9" in str(caught.value)


def test_prompts_take_any_sequence_of_int_ids_and_the_model_is_read_from_the_options() -> None:
    specs = prompt_specs([torch.tensor([1, 2]), (3,), PromptSpec(prompt_id="x", token_ids=(4,))])
    assert [(s.prompt_id, s.token_ids) for s in specs] == [
        ("p0", (1, 2)),
        ("p1", (3,)),
        ("x", (4,)),
    ]
    assert all(type(t) is int for s in specs for t in s.token_ids)
    with pytest.raises(InvalidPromptError, match=r"prompt 0: token_ids\[0\] is True"):
        prompt_specs([[True]])
    config = rollout_config(generator={**TINY_GENERATOR, "kv_budget_tokens": 100})
    model = GeneratorModel.of(config)
    assert (model.vocab_size, model.max_context, model.kv_budget_tokens) == (VOCAB, 256, 100)
    assert GeneratorModel.of(rollout_config(generator_kind="pipeline.bench.faulty:X")).shape is None
