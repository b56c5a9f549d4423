"""The pure parts of `seer serve`: request parsing and the prefix index."""

from __future__ import annotations

import pytest

from pipeline.serve.prefix_index import PrefixIndex
from pipeline.serve.protocol import (
    TOP_K_OFF,
    ContractError,
    Output,
    RequestError,
    parse_generate,
)


def parse(body: dict[str, object]) -> tuple[list, bool, bool]:  # type: ignore[type-arg]
    return parse_generate(body, context_len=256, vocab_size=259)


def test_top_k_off_and_greedy_map_onto_the_engine() -> None:
    [spec], is_batch, stream = parse(
        {"input_ids": [1, 2], "sampling_params": {"top_k": TOP_K_OFF, "temperature": 1e-9}}
    )
    assert not is_batch and not stream
    assert spec.params.top_k == 0 and spec.params.temperature == 0.0
    [minus_one], _, _ = parse({"input_ids": [1], "sampling_params": {"top_k": -1}})
    assert minus_one.params.top_k == 0
    [five], _, _ = parse({"input_ids": [1], "sampling_params": {"top_k": 5}})
    assert five.params.top_k == 5 and five.max_new_tokens == 128  # SGLang's default 128


def test_sampling_seed_is_the_requests_and_otherwise_derived_from_the_rid() -> None:
    [a], _, _ = parse({"input_ids": [1], "rid": "x", "sampling_params": {"sampling_seed": 7}})
    [b], _, _ = parse({"input_ids": [1], "rid": "x"})
    [c], _, _ = parse({"input_ids": [1], "rid": "y"})
    assert a.params.seed == 7 and b.params.seed != c.params.seed


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"input_ids": [1], "sampling_params": {"max_tokens": 1}}, ContractError),
        ({"input_ids": [1], "sampling_params": {"ignore_eos": 1}}, ContractError),
        ({"input_ids": [1.0]}, ContractError),
        ({"input_ids": []}, RequestError),
        ({"input_ids": [300]}, RequestError),
        ({"input_ids": [[1], [2]], "rid": ["a"]}, RequestError),
        ({"input_ids": [[1], [2]], "rid": ["a", "a"]}, RequestError),
        ({"input_ids": [1], "sampling_params": {"n": 2}}, RequestError),
        ({"text": "hi"}, RequestError),
        ({"input_ids": [1], "logprob_start_len": 0}, RequestError),
        ({"input_ids": [1] * 200, "sampling_params": {"max_new_tokens": 57}}, RequestError),
    ],
)
def test_bad_bodies_get_typed_errors(body: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        parse(body)


def test_version_spans_drop_a_version_that_produced_no_token() -> None:
    out = Output()
    out.note_version("a")
    out.note_version("b")  # before any token: "a" made nothing
    out.token_ids += [1, 2]
    out.note_version("c")
    assert out.spans == [("b", 0), ("c", 2)]


def test_prefix_index_hands_back_what_to_release() -> None:
    index = PrefixIndex(capacity=2)
    assert index.put((1, 2, 3), "a") == []
    assert index.put((1, 2, 3), "b") == ["a"]  # the same sequence: the newest KV wins
    assert index.put((4, 5), "c") == []
    assert index.put((6, 7), "d") == ["b"]  # over capacity: the oldest goes
    assert index.num_tokens == 2 and index.cached_tokens(num_parked=1) == 1
    assert index.take((4, 5)) == "c" and index.take((4, 5)) is None
    assert index.clear() == ["d"] and len(index) == 0
