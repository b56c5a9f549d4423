"""The KV budget holds under any load; preemption recomputes without changing outputs;
bad input gets a typed error and the engine keeps serving."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.generator import (
    ChunkRequest,
    ContextOverflowError,
    Draft,
    DuplicateRequestError,
    EngineError,
    InvalidRequestError,
    RequestNotInEngineError,
    SamplingParams,
    TokenOutOfVocabError,
    WeightVersionError,
)
from tests.actors.engine_util import drive, greedy_request, make_engine


@cache
def _truth(prompt: tuple[int, ...], n: int) -> tuple[int, ...]:
    return drive(make_engine(), [greedy_request("t", prompt, n)]).tokens("t")


def test_preemption_is_counted_and_outputs_are_unchanged() -> None:
    prompts = [tuple(range(i + 1, i + 9)) for i in range(6)]
    engine = make_engine(max_batch=6, kv_budget_tokens=120)
    run = drive(engine, [greedy_request(f"r{i}", p, 30) for i, p in enumerate(prompts)])
    counters = engine.counters()
    assert counters.num_preemptions > 0
    assert counters.num_recomputed_tokens > 0
    assert counters.kv_tokens_peak <= 120
    assert max(run.peaks) <= 120
    for i, p in enumerate(prompts):
        assert run.tokens(f"r{i}") == _truth(p, 30)


requests_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, 31), min_size=1, max_size=24), st.integers(1, 40), st.integers(0, 5)
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests_strategy, st.integers(64, 260), st.integers(1, 6), st.integers(4, 64))
def test_kv_budget_is_never_exceeded(
    specs: list[tuple[list[int], int, int]], budget: int, max_batch: int, prefill: int
) -> None:
    engine = make_engine(max_batch=max_batch, kv_budget_tokens=budget, max_prefill_tokens=prefill)
    requests = [greedy_request(f"r{i}", p, n) for i, (p, n, _) in enumerate(specs)]
    drafts = {f"r{i}": g for i, (_, _, g) in enumerate(specs)}

    def draft_fn(rid: str, context: list[int]) -> Draft:  # wrong drafts: pure KV pressure
        return Draft.chain([(context[-1] + k + 1) % 32 for k in range(drafts[rid])])

    run = drive(engine, requests, draft_fn)
    assert engine.counters().kv_tokens_peak <= budget
    for i, (p, n, _) in enumerate(specs):
        result = run.results[f"r{i}"]
        truth = _truth(tuple(p), n)
        if result.finish_reason == "length":  # alone and out of KV: a prefix of the truth
            assert truth[: len(result.token_ids)] == result.token_ids
        else:
            assert result.token_ids == truth


@pytest.mark.parametrize(
    ("request_", "error", "match"),
    [
        (greedy_request("e", [], 4), InvalidRequestError, "empty prompt"),
        (greedy_request("e", [1] * 128, 4), ContextOverflowError, "context holds 128"),
        (greedy_request("e", [1], 0), InvalidRequestError, "max_chunk_tokens must be > 0"),
        (greedy_request("e", [1], -3), InvalidRequestError, "max_chunk_tokens must be > 0"),
        (greedy_request("e", [1, 32], 4), TokenOutOfVocabError, "token 32 at index 1"),
        (greedy_request("e", [1], 4, [-1]), TokenOutOfVocabError, "generated token -1"),
        (
            ChunkRequest("e", (1,), 4, params=SamplingParams(temperature=-1)),
            InvalidRequestError,
            "temperature",
        ),
        (ChunkRequest("e", (1,), 4, params=SamplingParams(top_p=0)), InvalidRequestError, "top_p"),
        (greedy_request("e", [1], 4, weight_version=3), WeightVersionError, "version 3"),
        (greedy_request("", [1], 4), InvalidRequestError, "request id"),
    ],
)
def test_bad_input_is_refused_and_engine_keeps_serving(
    request_: ChunkRequest, error: type[EngineError], match: str
) -> None:
    engine = make_engine()
    engine.add(greedy_request("ok", [1, 2], 6))
    engine.step()
    with pytest.raises(error, match=match):
        engine.add(request_)
    assert isinstance(error("x"), ValueError)
    run = drive(engine, [greedy_request("after", [1, 2], 6)])
    assert len(run.tokens("ok")) == 6 and run.tokens("after") == run.tokens("ok")


def test_context_over_kv_budget_duplicate_and_unknown_ids() -> None:
    engine = make_engine(kv_budget_tokens=16)
    with pytest.raises(ContextOverflowError, match="KV budget is 16"):
        engine.add(greedy_request("big", [1] * 16, 4))
    engine.add(greedy_request("dup", [1], 4))
    with pytest.raises(DuplicateRequestError):
        engine.add(greedy_request("dup", [1], 4))
    with pytest.raises(RequestNotInEngineError):
        engine.abort("nobody")
    assert not engine.release("nobody")
    assert len(drive(engine, []).tokens("dup")) == 4
