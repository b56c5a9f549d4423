"""SGLang's /generate contract, pure: request bodies, rids, seeds, response parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.generator import (
    ChunkRequest,
    ContextOverflowError,
    InvalidRequestError,
    SamplingParams,
    ServerError,
    WeightVersionError,
)
from actors.generator.sglang.protocol import (
    SAMPLING_KEYS,
    chunk_rid,
    clamp_new_tokens,
    error_message,
    generate_body,
    parse_generate,
    request_id_of,
    sampling_seed,
    sum_loads,
    validate_chunk,
)


def req(
    generated: tuple[int, ...] = (), max_new: int = 8, total: int | None = 20, **p: Any
) -> ChunkRequest:
    params = SamplingParams(**p)
    return ChunkRequest("r0:g1:s2;", (5, 6, 7), max_new, generated, params, 0, total)


def response(tokens: list[int], kind: str = "length", **meta: Any) -> dict[str, Any]:
    finish: dict[str, Any] = {"type": kind}
    if kind == "length":
        finish["length"] = len(tokens)
    return {
        "text": "",
        "output_ids": tokens,
        "meta_info": {
            "id": "x",
            "finish_reason": finish,
            "output_token_logprobs": [[-1.0 - i, t, None] for i, t in enumerate(tokens)],
            "weight_version": "0",
            **meta,
        },
    }


def parse(data: Any, request: ChunkRequest, max_new: int = 8, context: int = 64) -> Any:
    return parse_generate(
        data,
        request,
        max_new_tokens=max_new,
        context_len=context,
        eos_token_id=3,
        weight_version=0,
    )


@given(st.lists(st.tuples(st.text(max_size=6), st.integers(0, 10**6)), min_size=2, max_size=8))
def test_rids_are_prefix_free_unique_and_keep_the_request_id(keys: list[tuple[str, int]]) -> None:
    rids = {chunk_rid(r, n) for r, n in set(keys)}
    assert len(rids) == len(set(keys))
    for a in rids:
        assert request_id_of(a) in {r for r, _ in keys}
        assert not any(b != a and b.startswith(a) for b in rids)


def test_the_body_holds_only_schema_keys_and_translates_top_k() -> None:
    body = generate_body(req(top_k=0), "rid#", 8, eos_token_id=3)
    assert set(body["sampling_params"]) <= SAMPLING_KEYS
    assert "top_k" not in body["sampling_params"]  # off = omitted, never 0
    assert body["sampling_params"]["stop_token_ids"] == [3]
    assert body["return_logprob"] is True and body["input_ids"] == [5, 6, 7]
    on = generate_body(req(top_k=5, ignore_eos=True), "rid#", 8, eos_token_id=3)
    assert on["sampling_params"]["top_k"] == 5 and on["sampling_params"]["stop_token_ids"] == []
    assert isinstance(on["sampling_params"]["max_new_tokens"], int)


def test_siblings_get_different_seeds_and_a_resumed_sample_the_same() -> None:
    a, b = sampling_seed("g1:s0;", 7), sampling_seed("g1:s1;", 7)
    assert a != b and a == sampling_seed("g1:s0;", 7)
    assert 0 <= a < 2**63 and sampling_seed("g1:s0;", None) != sampling_seed("g1:s0;", 8)


def test_max_new_tokens_is_clamped_to_budget_and_context() -> None:
    assert clamp_new_tokens(req(max_new=8, total=20), 64) == 8
    assert clamp_new_tokens(req((1,) * 15, max_new=8, total=20), 64) == 5  # total budget left
    assert clamp_new_tokens(req((1,) * 5, max_new=8, total=None), 12) == 4  # context left


def test_bad_input_is_refused_before_sending() -> None:
    with pytest.raises(ContextOverflowError):
        validate_chunk(req((1,) * 9), 12, 0)
    with pytest.raises(InvalidRequestError):
        validate_chunk(req(max_new=0), 64, 0)
    with pytest.raises(WeightVersionError):
        validate_chunk(req(), 64, 1)


def test_finish_reasons_map_as_sglang_md_says() -> None:
    assert parse(response([1, 2, 3], "stop"), req())[0].finish_reason == "stop"
    assert parse(response([1] * 8), req())[0].finish_reason == "chunk"  # budget left
    assert parse(response([1] * 5), req((1,) * 15))[0].finish_reason == "length"  # total
    assert parse(response([1] * 3), req(), context=6 + 3)[0].finish_reason == "length"
    assert parse(response([1] * 2), req())[0].finish_reason == "length"  # server stopped short
    partial = parse(response([1, 2], "abort"), req())[0]
    assert partial.finish_reason == "abort" and partial.token_ids == (1, 2)
    queued = response([], "abort")
    del queued["meta_info"]["output_token_logprobs"]
    assert parse(queued, req())[0].token_ids == ()


def test_a_stop_token_the_server_passed_ends_the_chunk() -> None:
    result = parse(response([1, 3, 4, 5], "length"), req(), max_new=4)[0]
    assert result.token_ids == (1, 3) and result.finish_reason == "stop"
    assert result.logprobs == (-1.0, -2.0)


def test_tokens_logprobs_cache_and_spec_statistics_are_read() -> None:
    data = response([4, 5], "stop", cached_tokens=3, spec_verify_ct=1, spec_num_correct_drafts=1)
    result, spec = parse(data, req())
    assert result.token_ids == (4, 5) and result.logprobs == (-1.0, -2.0)
    assert result.num_cached_tokens == 3 and spec.num_verify_steps == 1
    assert result.num_accepted_tokens == 1 and result.weight_version == 0


def test_weight_versions_are_checked() -> None:
    with pytest.raises(WeightVersionError):
        parse(response([1], "stop", weight_version="1"), req())
    spans = [{"version": "0", "start": 0, "end": 1}, {"version": "1", "start": 1, "end": 2}]
    with pytest.raises(WeightVersionError):
        parse(response([1, 2], "stop", weight_versions=spans), req())


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"meta_info": None},
        {"meta_info": {"finish_reason": None, "output_token_logprobs": []}},
        {"meta_info": {"finish_reason": {"type": "what"}, "output_token_logprobs": []}},
        {"meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[0.1, 2]]}},
        {**response([1], "stop"), "output_ids": [9]},
    ],
)
def test_malformed_responses_are_server_errors(data: Any) -> None:
    with pytest.raises(ServerError):
        parse(data, req())


def test_error_bodies_give_the_server_message() -> None:
    assert "bad key" in error_message(400, b'{"error": "bad key"}')
    assert "too long" in error_message(400, b'{"error": {"message": "too long"}}')
    assert "<html>" in error_message(500, b"<html>")


def test_loads_sum_over_ranks() -> None:
    ranks = [
        {"num_running_reqs": 2, "num_waiting_reqs": 1, "num_used_tokens": 10,
         "max_total_num_tokens": 100, "max_running_requests": 4},
        {"num_running_reqs": 3, "num_waiting_reqs": 0, "num_used_tokens": 5,
         "max_total_num_tokens": 100, "max_running_requests": 4},
    ]  # fmt: skip
    assert sum_loads({"loads": ranks}) == (5, 1, 15, 200, 8)
    with pytest.raises(ServerError):
        sum_loads({"aggregate": {}})
