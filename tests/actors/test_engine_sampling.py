"""Sampling with drafts is lossless: output frequencies match the model's exact law.

A 6-token vocabulary and 3 generated tokens give 216 outcomes whose exact probabilities come
from the uncached forward. Thousands of seeded samples, plain or with chain/tree drafts (that
do or do not hold the likeliest token), must pass a chi-square goodness-of-fit test at
p = 0.001; the same counts must fail against a slightly different law (the test has power).
Emitted logprobs must equal log p under the sampling distribution.
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import pytest
import torch

from actors.generator import ChunkRequest, Draft, SamplingParams
from actors.generator.builtin.sampler import SamplingBatch, sampling_probs
from actors.model import LlamaModel, ModelConfig
from tests.actors.engine_util import DraftFn, drive, make_engine

VOCAB, PROMPT, LENGTH, SAMPLES = 6, (0, 1), 3, 10_000
CFG = ModelConfig(
    vocab_size=VOCAB,
    hidden=16,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate=32,
    max_context=16,
)
PARAMS = {
    "plain": SamplingParams(temperature=1.0),
    "filtered": SamplingParams(temperature=0.7, top_k=4, top_p=0.9),
}


@cache
def _model() -> LlamaModel:
    return LlamaModel.random(CFG, seed=11, std=0.6).eval()


def _probs(prefix: tuple[int, ...], params: SamplingParams) -> list[float]:
    with torch.no_grad():
        logits = _model()(torch.tensor([list(PROMPT + prefix)]))[0, -1:]
    batch = SamplingBatch.build([params.temperature], [params.top_k], [params.top_p], [0], [0])
    return sampling_probs(logits, batch)[0].tolist()


@cache
def _table(kind: str) -> dict[tuple[int, ...], list[float]]:
    prefixes = [p for n in range(LENGTH) for p in itertools.product(range(VOCAB), repeat=n)]
    return {p: _probs(p, PARAMS[kind]) for p in prefixes}


def _joint(table: dict[tuple[int, ...], list[float]]) -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.product(range(VOCAB), repeat=LENGTH):
        out[seq] = math.prod(table[seq[:i]][seq[i]] for i in range(LENGTH))
    return out


def _ranked(table: dict[tuple[int, ...], list[float]], prefix: tuple[int, ...]) -> list[int]:
    p = table[prefix] if prefix in table else [1.0] * VOCAB
    return sorted(range(VOCAB), key=lambda t: -p[t])


def _drafts(kind: str, table: dict[tuple[int, ...], list[float]]) -> DraftFn | None:
    def fn(rid: str, context: list[int]) -> Draft | None:
        done = tuple(context[len(PROMPT) :])
        first = _ranked(table, done)
        if kind == "likely_chain":
            return Draft.chain([first[0], _ranked(table, (*done, first[0]))[0]])
        if kind == "unlikely_chain":
            return Draft.chain([first[-1], _ranked(table, (*done, first[-1]))[-1]])
        # tree: root -> best (0), worst (1), second (2); best -> its best (3), worst (4)
        below = _ranked(table, (*done, first[0]))
        return Draft((first[0], first[-1], first[1], below[0], below[-1]), (-1, -1, -1, 0, 0))

    return None if kind == "none" else fn


def _chi_square_critical(df: int, z: float = 3.0902) -> float:
    """Wilson-Hilferty upper quantile of chi-square(df); z = 3.09 is p = 0.001."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi_square(
    counts: dict[tuple[int, ...], int], law: dict[tuple[int, ...], float], total: int
) -> tuple[float, int]:
    stat, rest_obs, rest_exp, bins = 0.0, 0, 0.0, 0
    for seq, p in law.items():
        expected = p * total
        if expected >= 5:
            stat += (counts.get(seq, 0) - expected) ** 2 / expected
            bins += 1
        else:
            rest_obs += counts.get(seq, 0)
            rest_exp += expected
    if rest_exp > 0:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        bins += 1
    return stat, bins - 1


def _sample(kind: str, drafts: str, seed0: int) -> tuple[dict[tuple[int, ...], int], int]:
    table = _table(kind)
    engine = make_engine(_model(), max_batch=512, kv_budget_tokens=8192)
    params = PARAMS[kind]
    requests = [
        ChunkRequest(
            f"s{i}",
            PROMPT,
            LENGTH,
            params=SamplingParams(params.temperature, params.top_k, params.top_p, seed=seed0 + i),
            max_new_tokens=LENGTH,
        )
        for i in range(SAMPLES)
    ]
    run = drive(engine, requests, _drafts(drafts, table))
    assert len(run.results) == SAMPLES
    counts: dict[tuple[int, ...], int] = {}
    worst = 0.0  # logprobs under the sampling distribution
    for res in run.results.values():
        seq = res.token_ids
        assert len(seq) == LENGTH and len(res.logprobs) == LENGTH
        counts[seq] = counts.get(seq, 0) + 1
        for i, lp in enumerate(res.logprobs):
            worst = max(worst, abs(lp - math.log(table[seq[:i]][seq[i]])))
    assert worst <= 1e-4, worst
    return counts, engine.counters().num_accepted_tokens


@cache
def _hotter(kind: str) -> dict[tuple[int, ...], float]:
    """The joint law at a 25% higher temperature: the wrong law the test must reject."""
    p = PARAMS[kind]
    hot = SamplingParams(p.temperature * 1.25, p.top_k, p.top_p)
    return _joint({k: _probs(k, hot) for k in _table(kind)})


@pytest.mark.parametrize("kind", sorted(PARAMS))
@pytest.mark.parametrize("drafts", ["none", "likely_chain", "unlikely_chain", "tree"])
def test_draft_sampling_matches_exact_law(kind: str, drafts: str) -> None:
    law = _joint(_table(kind))
    counts, accepted = _sample(kind, drafts, seed0=10_000 * len(drafts))
    stat, df = _chi_square(counts, law, SAMPLES)
    assert stat < _chi_square_critical(df), (stat, df)
    if drafts in ("likely_chain", "tree"):
        assert accepted > SAMPLES // 4
    wrong_stat, wrong_df = _chi_square(counts, _hotter(kind), SAMPLES)
    assert wrong_stat > _chi_square_critical(wrong_df), "the test would not see a 25% error"


def test_seeded_sampling_is_reproducible_across_chunks_and_drafts() -> None:
    params = SamplingParams(temperature=1.0, seed=7)
    whole = drive(make_engine(_model()), [ChunkRequest("r", PROMPT, 9, params=params)])
    tokens: tuple[int, ...] = ()
    likely = _drafts("likely_chain", _table("plain"))
    accepted = 0
    for _ in range(3):  # three chunks of 3 tokens, each on a fresh engine, with drafts
        engine = make_engine(_model())
        run = drive(engine, [ChunkRequest("r", PROMPT, 3, tokens, params)], likely)
        tokens += run.tokens("r")
        accepted += engine.counters().num_accepted_tokens
    assert accepted > 0
    assert tokens == whole.tokens("r")
    other = drive(
        make_engine(_model()),
        [ChunkRequest("r", PROMPT, 9, params=SamplingParams(temperature=1.0, seed=8))],
    )
    assert other.tokens("r") != whole.tokens("r")


def test_top_k_top_p_filter() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.4, 0.2, 0.3]]))

    def probs(k: int, p: float) -> list[float]:
        batch = SamplingBatch.build([1.0], [k], [p], [0], [0])
        return [round(x, 4) for x in sampling_probs(logits, batch)[0].tolist()]

    assert probs(0, 1.0) == [0.1, 0.4, 0.2, 0.3]
    assert probs(2, 1.0) == [0.0, round(4 / 7, 4), 0.0, round(3 / 7, 4)]
    assert probs(0, 0.7) == [0.0, round(4 / 7, 4), 0.0, round(3 / 7, 4)]  # 0.4 + 0.3 >= 0.7
    assert probs(0, 0.71) == [0.0, round(4 / 9, 4), round(2 / 9, 4), round(3 / 9, 4)]
    assert probs(3, 0.5) == [0.0, round(4 / 7, 4), 0.0, round(3 / 7, 4)]
    assert probs(3, 0.4) == [0.0, 1.0, 0.0, 0.0]
