"""Greedy decoding with drafts of every kind equals greedy decoding without them."""

from __future__ import annotations

import random

import pytest

from actors.generator import Draft, DraftError
from tests.actors.engine_util import DraftFn, drive, greedy_request, make_engine

PROMPTS = {"a": [1, 2, 3], "b": [5, 6, 7, 8, 9, 10, 11], "c": [4], "d": [9, 9, 2, 30]}
N = 24


def _plain() -> dict[str, tuple[int, ...]]:
    run = drive(make_engine(), [greedy_request(r, p, N) for r, p in PROMPTS.items()])
    return {r: run.tokens(r) for r in PROMPTS}


def _oracle(truth: dict[str, tuple[int, ...]], length: int, wrong_from: int | None) -> DraftFn:
    """Chain of the true next tokens, corrupted from index ``wrong_from`` on."""

    def fn(rid: str, context: list[int]) -> Draft:
        done = len(context) - len(PROMPTS[rid])
        chain = list(truth[rid][done : done + length])
        if wrong_from is not None and wrong_from < len(chain):
            chain[wrong_from] = (chain[wrong_from] + 1) % 32
        return Draft.chain(chain)

    return fn


def _random_drafts(seed: int, tree: bool) -> DraftFn:
    rng = random.Random(seed)

    def fn(rid: str, context: list[int]) -> Draft:
        n = rng.randint(0, 6)
        tokens: list[int] = []
        parents: list[int] = []
        for i in range(n):
            parent = rng.randint(-1, i - 1) if tree else i - 1
            used = {t for t, p in zip(tokens, parents, strict=True) if p == parent}
            tokens.append(rng.choice([t for t in range(32) if t not in used]))
            parents.append(parent)
        return Draft(tuple(tokens), tuple(parents))

    return fn


def _tree(truth: dict[str, tuple[int, ...]]) -> DraftFn:
    """A tree whose true path is the second child, with wrong branches around it."""

    def fn(rid: str, context: list[int]) -> Draft:
        done = len(context) - len(PROMPTS[rid])
        nxt = list(truth[rid][done : done + 3])
        if len(nxt) < 3:
            return Draft.chain(nxt)
        w = [(t + 7) % 32 for t in nxt]
        # root -> w0 (0), nxt0 (1); nxt0 -> w1 (2), nxt1 (3); nxt1 -> nxt2 (4); w0 -> nxt1 (5)
        return Draft((w[0], nxt[0], w[1], nxt[1], nxt[2], nxt[1]), (-1, -1, 1, 1, 3, 0))

    return fn


@pytest.mark.parametrize(
    "kind", ["correct", "partial", "wrong_first", "random_chain", "random_tree", "tree"]
)
def test_greedy_with_drafts_equals_plain(kind: str) -> None:
    truth = _plain()
    fns: dict[str, DraftFn] = {
        "correct": _oracle(truth, 5, None),
        "partial": _oracle(truth, 6, 3),
        "wrong_first": _oracle(truth, 4, 0),
        "random_chain": _random_drafts(1, tree=False),
        "random_tree": _random_drafts(2, tree=True),
        "tree": _tree(truth),
    }
    engine = make_engine()
    run = drive(engine, [greedy_request(r, p, N) for r, p in PROMPTS.items()], fns[kind])
    assert {r: run.tokens(r) for r in PROMPTS} == truth
    counters = engine.counters()
    assert counters.num_draft_tokens > 0
    if kind in ("correct", "partial", "tree"):
        assert counters.num_accepted_tokens > 0
        assert counters.num_steps < N  # several tokens per step
    if kind == "wrong_first":
        assert counters.num_accepted_tokens == 0


def test_rejected_draft_kv_is_discarded() -> None:
    engine = make_engine()
    engine.add(greedy_request("r", [1, 2, 3], 6))
    engine.step()  # prefill + first token
    engine.step({"r": Draft.chain([31, 30, 29, 28])})
    load = engine.load()
    assert load.kv_tokens_used == 3 + 2 - 1 + engine.counters().num_accepted_tokens


@pytest.mark.parametrize(
    ("draft", "match"),
    [
        (Draft((3, 3), (-1, -1)), "same token"),
        (Draft((3,), (0,)), "parents"),
        (Draft((99,), (-1,)), "outside"),
        (Draft((1, 2), (-1,)), "parents"),
        (Draft(tuple(range(20)), tuple(range(-1, 19))), "limit"),
    ],
)
def test_bad_drafts_are_refused_and_engine_keeps_serving(draft: Draft, match: str) -> None:
    engine = make_engine()
    engine.add(greedy_request("r", [1, 2, 3], 4))
    engine.step()
    with pytest.raises(DraftError, match=match):
        engine.step({"r": draft})
    run = drive(engine, [])
    assert len(run.tokens("r")) == 4
