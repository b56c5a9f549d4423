"""The Engine surface: protocol conformance, load and error results, the step-time profile."""

from __future__ import annotations

import numpy as np
import pytest

from actors.generator import (
    ChunkRequest,
    Engine,
    InvalidRequestError,
    SamplingParams,
    error_result,
)
from actors.generator.builtin import EngineConfig, StepProfile
from actors.generator.builtin import profile as profile_module
from tests.actors.engine_util import GREEDY, drive, greedy_request, make_engine, tiny_model


def test_torch_engine_implements_the_engine_protocol() -> None:
    assert isinstance(make_engine(), Engine)


def test_load_reports_running_waiting_parked_and_kv() -> None:
    engine = make_engine(max_batch=2, kv_budget_tokens=100)
    for i in range(3):
        engine.add(greedy_request(f"r{i}", [1, 2, 3], 2))
    load = engine.load()
    assert (load.num_running, load.num_waiting, load.kv_tokens_total) == (0, 3, 100)
    engine.step()
    load = engine.load()
    assert (load.num_running, load.num_waiting, load.kv_tokens_used) == (2, 1, 6)
    drive(engine, [])
    load = engine.load()
    assert (load.num_running, load.num_waiting, load.num_parked) == (0, 0, 3)
    assert load.kv_tokens_used == 3 * 4


def test_error_result_carries_the_reason() -> None:
    result = error_result("r", InvalidRequestError("request 'r' has an empty prompt"), 3)
    assert result.finish_reason == "error" and result.weight_version == 3
    assert result.error == "InvalidRequestError: request 'r' has an empty prompt"
    assert result.is_finished and result.token_ids == ()


def test_lone_request_out_of_kv_finishes_with_length() -> None:
    engine = make_engine(kv_budget_tokens=12)
    run = drive(engine, [greedy_request("r", [1, 2, 3, 4], 40)])
    assert run.results["r"].finish_reason == "length"
    assert len(run.tokens("r")) == 12 - 4 + 1
    assert engine.counters().kv_tokens_peak <= 12


def test_sampled_outputs_survive_preemption() -> None:
    def requests() -> list[ChunkRequest]:
        return [
            ChunkRequest(
                f"r{i}",
                (i + 1, 2, 3, 4, 5),
                30,
                params=SamplingParams(temperature=0.9, top_k=8, seed=i),
            )
            for i in range(6)
        ]

    free = drive(make_engine(), requests())
    tight = make_engine(max_batch=6, kv_budget_tokens=110)
    squeezed = drive(tight, requests())
    assert tight.counters().num_preemptions > 0
    for i in range(6):
        assert squeezed.tokens(f"r{i}") == free.tokens(f"r{i}")
        assert squeezed.results[f"r{i}"].logprobs == pytest.approx(
            free.results[f"r{i}"].logprobs, abs=1e-5
        )


def test_step_profile_interpolates() -> None:
    table = np.array([[1.0, 2.0, 4.0], [2.0, 4.0, 8.0]])  # batches 1, 3; g 0, 1, 3
    profile = StepProfile([1, 3], [0, 1, 3], table)
    assert profile.seconds(1, 0) == 1.0
    assert profile.seconds(2, 1) == pytest.approx(3.0)
    assert profile.seconds(1, 2) == pytest.approx(3.0)
    assert profile.seconds(6, 3) == pytest.approx(16.0)  # above the grid: linear in batch
    assert profile.seconds(1, 9) == 4.0  # g clamped
    assert len(profile.as_rows()) == 6


def test_engine_profiles_its_step_time() -> None:
    engine = make_engine(
        profile=True,
        profile_batches=(1, 4),
        profile_draft_lens=(0, 2),
        profile_context=16,
        profile_repeats=1,
    )
    assert engine.step_time(1, 0) > 0 and engine.step_time(4, 2) > 0
    lazy = make_engine()  # profile=False: measured on first use
    assert lazy.step_time(2, 1) > 0


def test_engine_config_is_validated() -> None:
    with pytest.raises(ValueError, match="kv_budget_tokens"):
        EngineConfig(kv_budget_tokens=0)
    with pytest.raises(ValueError, match="num_threads"):
        EngineConfig(num_threads=0)


def test_a_step_reports_its_decoding_rows_total_and_longest_context() -> None:
    """What the simulator's step log prices a step by: the built-in engine pads attention
    to the longest decoding row, so the step reports it beside the rows' total."""
    engine = make_engine()
    for rid, n in (("short", 5), ("long", 12)):
        engine.add(ChunkRequest(rid, tuple(range(1, n + 1)), 4, params=GREEDY))
    engine.step()  # prefills both (their first token comes from the prefill)
    result = engine.step()
    assert result.num_decode_rows == 2
    assert result.num_decode_max_context == 12  # cached: the prompt (its new token is fed)
    assert result.num_decode_context_tokens == 5 + 12


def test_step_profile_ratios_survive_a_machine_slowing_down_while_it_measures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The policy decides on T(B, g) / T(B, 0): a machine that runs 3x slower from a third
    of the way through the measurement must not move those ratios (the points are timed in
    rounds, each round over the whole grid; timed one point's repeats after another's,
    T(1, 8) / T(1, 0) came out 3x too high)."""
    true_ms = {(b, g): b * (1.0 + 0.25 * g) for b in (1, 4) for g in (0, 2, 8)}
    calls: list[tuple[int, int]] = []
    total = 6 * 8  # 6 points, a warm-up round and 7 timed ones

    def timed(probe: profile_module._Probe) -> float:
        calls.append((probe.batch, probe.g))
        slow = 3.0 if len(calls) > total // 3 else 1.0
        return 1e-3 * true_ms[(probe.batch, probe.g)] * slow

    monkeypatch.setattr(profile_module, "_timed", timed)
    profile = StepProfile.measure(tiny_model(), [1, 4], [0, 2, 8], context=16, repeats=7)
    assert len(calls) == total and set(calls) == set(true_ms)
    for b in (1, 4):
        for g in (2, 8):
            measured = profile.seconds(b, g) / profile.seconds(b, 0)
            assert measured == pytest.approx(true_ms[(b, g)] / true_ms[(b, 0)], rel=0.01)
