"""Chunked generation: resume from parked KV, re-prefill elsewhere, abort, weight swaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.generator import ChunkRequest, EngineBusyError, RequestNotInEngineError, SamplingParams
from actors.model import LlamaModel, save_model
from tests.actors.engine_util import (
    TINY,
    drive,
    greedy_request,
    make_engine,
    reference_greedy,
    tiny_model,
)

PROMPT = [3, 14, 15, 9, 26, 5]


def test_engine_greedy_matches_reference_forward() -> None:
    run = drive(make_engine(), [greedy_request("r", PROMPT, 20)])
    assert list(run.tokens("r")) == reference_greedy(tiny_model(), PROMPT, 20)


def test_chunks_of_8_equal_one_long_generation_with_no_reprefill() -> None:
    whole = drive(make_engine(), [greedy_request("r", PROMPT, 64)]).tokens("r")
    engine = make_engine()
    tokens: tuple[int, ...] = ()
    for i in range(8):
        result = drive(engine, [greedy_request("r", PROMPT, 8, tokens)]).results["r"]
        assert result.finish_reason == "chunk"
        assert result.num_cached_tokens == (0 if i == 0 else len(PROMPT) + len(tokens) - 1)
        tokens += result.token_ids
    assert tokens == whole
    counters = engine.counters()
    assert counters.num_parked_hits == 7
    assert counters.num_prefill_tokens == len(PROMPT)  # only the first chunk prefilled
    assert counters.num_reprefills == 0
    assert engine.load().num_parked == 1


def test_chunk_on_a_fresh_engine_is_reprefilled_and_counted() -> None:
    whole = drive(make_engine(), [greedy_request("r", PROMPT, 24)]).tokens("r")
    tokens: tuple[int, ...] = ()
    for i in range(3):
        engine = make_engine()
        tokens += drive(engine, [greedy_request("r", PROMPT, 8, tokens)]).tokens("r")
        counters = engine.counters()
        assert counters.num_reprefills == (0 if i == 0 else 1)
        assert counters.num_reprefilled_tokens == (0 if i == 0 else len(PROMPT) + 8 * i)
        assert counters.num_parked_hits == 0
    assert tokens == whole


def test_parked_requests_are_evicted_least_recently_used() -> None:
    engine = make_engine(kv_budget_tokens=40)
    first = {
        rid: drive(engine, [greedy_request(rid, PROMPT, 4)]).tokens(rid) for rid in ("a", "b", "c")
    }  # 9 KV tokens parked each
    assert engine.load().kv_tokens_used == 27
    drive(engine, [greedy_request("a", PROMPT, 4, first["a"])])  # resumes: a is now MRU
    assert engine.counters().num_parked_hits == 1
    assert engine.load().kv_tokens_used == 9 + 9 + 13
    drive(engine, [greedy_request("d", [1] * 20, 4)])  # needs 20: evicts b, then c
    assert engine.counters().num_parked_evictions == 2
    assert (engine.release("b"), engine.release("c"), engine.release("a")) == (False, False, True)
    assert engine.load().kv_tokens_used == 23


def test_a_queued_requests_parked_kv_goes_last_and_the_last_queued_first() -> None:
    """Four chunks end in one step and their next chunks queue behind a new request that
    needs room. Evicting least-recently-used would cascade: the new request evicts a's KV,
    a then re-prefills and evicts b's, and so on through all four. The engine evicts the
    queued request that runs last (d): a, b and c resume their KV."""
    whole = drive(make_engine(), [greedy_request("a", PROMPT, 6)]).tokens("a")
    engine = make_engine(kv_budget_tokens=55)
    first = {rid: drive(engine, [greedy_request(rid, PROMPT, 4)]).tokens(rid) for rid in "abcd"}
    assert engine.load().kv_tokens_used == 4 * 9  # each parked 6 + 4 - 1 tokens
    again = [greedy_request(rid, PROMPT, 2, first[rid]) for rid in "abcd"]
    run = drive(engine, [greedy_request("x", [1] * 20, 1), *again])  # x needs 20: one goes
    counters = engine.counters()
    assert counters.num_parked_hits == 3 and counters.num_reprefills == 1
    assert counters.num_reprefilled_tokens == len(PROMPT) + 4  # d's prompt and first chunk
    assert counters.num_preemptions == 0
    assert all(first[r] + run.tokens(r) == whole for r in "abcd")  # the same prompt


def test_stop_token_and_ignore_eos() -> None:
    free = drive(make_engine(), [greedy_request("r", PROMPT, 12)]).tokens("r")
    eos = free[5]
    engine = make_engine(eos_token_id=eos)
    stopped = drive(engine, [greedy_request("r", PROMPT, 12)]).results["r"]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free[: free.index(eos) + 1]
    assert engine.load().num_parked == 0  # finished requests free their KV
    ignoring = ChunkRequest("s", tuple(PROMPT), 12, params=SamplingParams(0.0, ignore_eos=True))
    assert drive(make_engine(eos_token_id=eos), [ignoring]).tokens("s") == free


def test_length_finish_at_max_total_tokens_and_context() -> None:
    run = drive(make_engine(), [greedy_request("r", PROMPT, 8, max_new_tokens=5)])
    assert run.results["r"].finish_reason == "length" and len(run.tokens("r")) == 5
    run = drive(make_engine(max_seq_len=10), [greedy_request("r", PROMPT, 8)])
    assert run.results["r"].finish_reason == "length" and len(run.tokens("r")) == 4


def test_abort_running_waiting_and_parked() -> None:
    engine = make_engine(max_batch=1)
    engine.add(greedy_request("run", PROMPT, 50))
    engine.add(greedy_request("wait", PROMPT, 50))
    engine.step()
    engine.step()
    aborted = engine.abort("run")
    assert aborted is not None and aborted.finish_reason == "abort"
    assert len(aborted.token_ids) == 2
    waiting = engine.abort("wait")
    assert waiting is not None and waiting.token_ids == ()
    drive(engine, [greedy_request("park", PROMPT, 3)])
    assert engine.abort("park") is None and engine.load().num_parked == 0
    with pytest.raises(RequestNotInEngineError, match="no request 'ghost'"):
        engine.abort("ghost")
    assert engine.load().kv_tokens_used == 0
    assert len(drive(engine, [greedy_request("next", PROMPT, 3)]).tokens("next")) == 3


def _own_model() -> LlamaModel:
    """A model the engine may mutate (weight swaps load in place)."""
    return LlamaModel.random(TINY, seed=0, std=0.5)


def test_weight_swap_changes_version_and_outputs() -> None:
    engine = make_engine(_own_model())
    before = drive(engine, [greedy_request("r", PROMPT, 16)]).results["r"]
    assert before.weight_version == 0 and engine.weight_version == 0
    other = {k: v.clone() for k, v in tiny_model(seed=1).state_dict().items()}
    engine.add(greedy_request("busy", PROMPT, 4))
    with pytest.raises(EngineBusyError):
        engine.update_weights(other, version=1)
    drive(engine, [])
    engine.update_weights(other, version=1)
    assert engine.weight_version == 1 and engine.load().num_parked == 0
    after = drive(engine, [greedy_request("r2", PROMPT, 16, weight_version=1)]).results["r2"]
    assert after.weight_version == 1
    assert after.token_ids != before.token_ids
    assert list(after.token_ids) == reference_greedy(tiny_model(seed=1), PROMPT, 16)


def test_weight_swap_from_a_safetensors_file(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_model(tiny_model(seed=2), path)
    engine = make_engine(_own_model())
    engine.update_weights(str(path), version=7)
    run = drive(engine, [greedy_request("r", PROMPT, 8)])
    assert list(run.tokens("r")) == reference_greedy(tiny_model(seed=2), PROMPT, 8)
    assert run.results["r"].weight_version == 7


def test_weight_swap_with_wrong_weights_changes_nothing() -> None:
    engine = make_engine(_own_model())
    before = drive(engine, [greedy_request("r", PROMPT, 8)]).tokens("r")
    bad = {k: v for k, v in tiny_model(seed=1).state_dict().items() if k != "norm.weight"}
    with pytest.raises(ValueError, match=r"missing \['norm.weight'\]"):
        engine.update_weights(bad, version=1)
    assert engine.weight_version == 0
    assert drive(engine, [greedy_request("s", PROMPT, 8)]).tokens("s") == before
