"""Suffix tree (compiled core and pure-Python reference) against brute force."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.drafts.suffix_tree import (
    HAVE_COMPILED_CORE,
    SUFFIX_TREE_IMPL,
    MatcherLike,
    PySuffixTree,
    SpecResult,
    SuffixTree,
    SuffixTreeLike,
)
from pipeline.bench.drafts_core import bench_core, similar_sequences

Impl = type[SuffixTreeLike]
# The two implementations: the pure-Python twin and the compiled core (when built).
CompiledSuffixTree: Impl | None = SuffixTree if HAVE_COMPILED_CORE else None
IMPLS: list[Impl] = [PySuffixTree]
if CompiledSuffixTree is not None:
    IMPLS.append(CompiledSuffixTree)
impl_param = pytest.mark.parametrize("impl", IMPLS, ids=["python", "compiled"][: len(IMPLS)])

FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALPHA = 4


# --- brute force --------------------------------------------------------------------------


def bf_count(seqs: Sequence[Sequence[int]], p: Sequence[int]) -> int:
    n = len(p)
    return sum(1 for s in seqs for i in range(len(s) - n + 1) if list(s[i : i + n]) == list(p))


def bf_all_counts(seqs: Sequence[Sequence[int]], max_depth: int) -> Counter[tuple[int, ...]]:
    """count(p) for every stored pattern p (1 <= len(p) <= max_depth)."""
    out: Counter[tuple[int, ...]] = Counter()
    for s in seqs:
        for i in range(len(s)):
            for j in range(i + 1, min(len(s), i + max_depth) + 1):
                out[tuple(s[i:j])] += 1
    return out


def bf_conts(counts: Counter[tuple[int, ...]], p: tuple[int, ...], d: int) -> dict[int, int]:
    if len(p) >= d:
        return {}
    return {t: counts[(*p, t)] for t in range(ALPHA + 1) if counts[(*p, t)] > 0}


def bf_match(counts: Counter[tuple[int, ...]], ctx: Sequence[int], max_match: int, d: int) -> int:
    for length in range(min(max_match, len(ctx)), 0, -1):
        if bf_conts(counts, tuple(ctx[len(ctx) - length :]), d):
            return length
    return 0


def check_against(tree: SuffixTreeLike, seqs: dict[int, list[int]]) -> None:
    d = tree.max_depth
    vals = list(seqs.values())
    counts = bf_all_counts(vals, d)
    assert tree.num_sequences == len(seqs)
    assert tree.num_tokens == sum(map(len, vals))
    assert sorted(tree.seq_ids()) == sorted(seqs)
    for sid, toks in seqs.items():
        assert tree.has_sequence(sid)
        assert tree.seq_len(sid) == len(toks)
        assert tree.tokens(sid) == toks
    for p, c in counts.items():
        assert tree.count(p) == c, p
    # every pattern up to min(d, 4) over the alphabet, present or not
    for n in range(1, min(d, 4) + 1):
        for p in itertools.product(range(ALPHA + 1), repeat=n):
            assert tree.count(p) == counts.get(p, 0), p
            assert tree.continuations(p) == bf_conts(counts, p, d), p
    for p in counts:
        assert tree.continuations(p) == bf_conts(counts, p, d), p
    assert tree.continuations(()) == bf_conts(counts, (), d)


def interleaved_build(
    impl: Impl, max_depth: int, seqs: dict[int, list[int]], rng: random.Random
) -> SuffixTreeLike:
    """Append the sequences in random batches, interleaved across sequences."""
    tree = impl(max_depth)
    pos = dict.fromkeys(seqs, 0)
    for sid, toks in seqs.items():
        if not toks:
            tree.append(sid, [])
    while any(pos[s] < len(seqs[s]) for s in seqs):
        sid = rng.choice([s for s in seqs if pos[s] < len(seqs[s])])
        k = rng.randint(1, 5)
        tree.append(sid, seqs[sid][pos[sid] : pos[sid] + k])
        pos[sid] = min(len(seqs[sid]), pos[sid] + k)
    return tree


seq_lists = st.lists(st.lists(st.integers(0, ALPHA), max_size=40), min_size=1, max_size=5)
seq_ids = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=5, max_size=5, unique=True)


def with_ids(lists: list[list[int]], ids: list[int]) -> dict[int, list[int]]:
    return dict(zip(ids, lists, strict=False))


# --- structure ----------------------------------------------------------------------------


def test_selected_impl() -> None:
    assert HAVE_COMPILED_CORE, "the compiled core should be built (pip install -e .)"
    assert SUFFIX_TREE_IMPL == "compiled"
    from actors.drafts import _suffix_tree

    assert SuffixTree is _suffix_tree.SuffixTree  # the pybind11 class itself, no wrapper
    assert type(SuffixTree(4).matcher()) is _suffix_tree.Matcher


@impl_param
@FAST
@given(lists=seq_lists, ids=seq_ids, max_depth=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_counts_match_brute_force(
    impl: Impl, lists: list[list[int]], ids: list[int], max_depth: int, seed: int
) -> None:
    seqs = with_ids(lists, ids)
    tree = interleaved_build(impl, max_depth, seqs, random.Random(seed))
    check_against(tree, seqs)


@impl_param
@FAST
@given(lists=seq_lists, ids=seq_ids, max_depth=st.integers(1, 8), data=st.data())
def test_remove_restores_counts(
    impl: Impl, lists: list[list[int]], ids: list[int], max_depth: int, data: st.DataObject
) -> None:
    seqs = with_ids(lists, ids)
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    tree = interleaved_build(impl, max_depth, seqs, rng)
    gone = data.draw(st.lists(st.sampled_from(sorted(seqs)), unique=True))
    for sid in gone:
        tree.remove(sid)
        with pytest.raises(KeyError):
            tree.remove(sid)
        assert not tree.has_sequence(sid)
    rest = {s: t for s, t in seqs.items() if s not in gone}
    check_against(tree, rest)
    fresh = interleaved_build(impl, max_depth, rest, rng)
    for p in bf_all_counts(list(seqs.values()), max_depth):
        assert tree.count(p) == fresh.count(p), p
        assert tree.continuations(p) == fresh.continuations(p), p
    # the tree keeps working after removals: re-add removed ids and new tokens
    for sid in gone:
        tree.append(sid, seqs[sid])
    for sid in list(seqs)[:2]:
        tree.append(sid, [1, 2, 3])
        seqs[sid] = [*seqs[sid], 1, 2, 3]
    check_against(tree, seqs)


@impl_param
def test_remove_all_then_reuse(impl: Impl) -> None:
    rng = random.Random(5)
    tree = impl(6)
    for rnd in range(3):
        seqs = {i + 10 * rnd: [rng.randint(0, ALPHA) for _ in range(30)] for i in range(4)}
        for sid, toks in seqs.items():
            tree.append(sid, toks)
        check_against(tree, seqs)
        for sid in seqs:
            tree.remove(sid)
        assert tree.num_tokens == 0 and tree.num_sequences == 0 and tree.num_nodes == 0
        assert tree.continuations(()) == {}


# --- matching -----------------------------------------------------------------------------


@impl_param
@FAST
@given(
    lists=seq_lists,
    ids=seq_ids,
    max_depth=st.integers(1, 8),
    ctx=st.lists(st.integers(0, ALPHA), max_size=20),
    max_match=st.integers(0, 10),
)
def test_match_len_brute_force(
    impl: Impl,
    lists: list[list[int]],
    ids: list[int],
    max_depth: int,
    ctx: list[int],
    max_match: int,
) -> None:
    seqs = with_ids(lists, ids)
    tree = interleaved_build(impl, max_depth, seqs, random.Random(0))
    counts = bf_all_counts(list(seqs.values()), max_depth)
    assert tree.match_len(ctx, max_match) == bf_match(counts, ctx, max_match, max_depth)


@impl_param
@FAST
@given(
    lists=seq_lists,
    ids=seq_ids,
    max_depth=st.integers(2, 10),
    feeds=st.lists(st.lists(st.integers(0, ALPHA), max_size=4), max_size=12),
    max_match=st.integers(0, 10),
    slack=st.integers(0, 3),
)
def test_matcher_equals_full_match_on_static_tree(
    impl: Impl,
    lists: list[list[int]],
    ids: list[int],
    max_depth: int,
    feeds: list[list[int]],
    max_match: int,
    slack: int,
) -> None:
    seqs = with_ids(lists, ids)
    tree = interleaved_build(impl, max_depth, seqs, random.Random(1))
    m = tree.matcher(max_match, slack)
    fed: list[int] = []
    for f in feeds:
        m.feed(f)
        fed += f
        assert m.match_len == tree.match_len(fed, max_match)
        r = m.speculate(max_tokens=3)
        assert r.match_len == m.match_len
        assert r == tree.speculate(fed, max_tokens=3, max_match=max_match)
    m.reset()
    assert m.match_len == 0
    m.feed(fed[-3:])
    assert m.match_len == tree.match_len(fed[-3:], max_match)


@impl_param
@FAST
@given(
    lists=st.lists(st.lists(st.integers(0, 2), max_size=30), min_size=2, max_size=4),
    max_depth=st.integers(2, 10),
    slack=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_matcher_lower_bound_on_growing_tree(
    impl: Impl, lists: list[list[int]], max_depth: int, slack: int, seed: int
) -> None:
    """Siblings stream tokens while request 0 decodes: the matcher never overshoots."""
    rng = random.Random(seed)
    tree = impl(max_depth)
    m = tree.matcher(8, slack)
    pos = [0] * len(lists)
    fed: list[int] = []
    while any(p < len(s) for p, s in zip(pos, lists, strict=True)):
        i = rng.randrange(len(lists))
        k = rng.randint(1, 3)
        new = lists[i][pos[i] : pos[i] + k]
        pos[i] += len(new)
        tree.append(i, new)
        if i == 0:
            m.feed(new)
            fed += new
        full = tree.match_len(fed, 8)
        assert m.match_len <= full
        r = m.speculate(max_tokens=2, top_k_paths=2)
        assert m.match_len <= full and r.match_len == m.match_len
    # with a static tree again, repeated feeds catch up (slack > 0) or stay a lower bound
    for _ in range(8):
        m.feed([])
    if slack > 0:
        assert m.match_len == tree.match_len(fed, 8)


@impl_param
def test_matcher_after_remove_falls_back(impl: Impl) -> None:
    tree = impl(16)
    tree.append(1, [1, 2, 3, 4, 5, 6, 7])
    tree.append(2, [3, 4, 9])
    m = tree.matcher(8)
    m.feed([1, 2, 3, 4])
    assert m.match_len == 4
    tree.remove(1)
    r = m.speculate(max_tokens=4)
    assert r.match_len == 2 and r.token_ids == (9,) and m.match_len == 2
    tree.remove(2)
    r = m.speculate(max_tokens=4)
    assert r == SpecResult((), (), (), 0.0, 0)


# --- drafts -------------------------------------------------------------------------------


def check_draft(
    r: SpecResult,
    counts: Counter[tuple[int, ...]],
    ctx: Sequence[int],
    max_depth: int,
    max_tokens: int,
    top_k: int,
    min_prob: float,
) -> None:
    n = len(r.token_ids)
    assert len(r.parents) == len(r.probs) == n <= max_tokens
    if r.match_len == 0:
        assert n == 0
        return
    base = tuple(ctx[len(ctx) - r.match_len :])
    paths: list[tuple[int, ...]] = []
    has_child = [False] * n
    siblings: set[tuple[int, int]] = set()
    for i, (tok, par, prob) in enumerate(zip(r.token_ids, r.parents, r.probs, strict=True)):
        assert -1 <= par < i
        assert (par, tok) not in siblings
        siblings.add((par, tok))
        path = (*(paths[par] if par >= 0 else ()), tok)
        paths.append(path)
        if par >= 0:
            has_child[par] = True
        assert len(path) + r.match_len <= max_depth
        expect = 1.0
        for j in range(len(path)):
            expect *= counts[base + path[: j + 1]] / counts[base + path[:j]]
        assert abs(prob - expect) <= 1e-9
        assert prob >= min_prob
    leaves = sum(1 for h in has_child if not h)
    assert leaves <= top_k
    if top_k == 1:
        assert list(r.parents) == list(range(-1, n - 1))
    assert abs(r.score - sum(r.probs)) <= 1e-9


@FAST
@given(
    lists=st.lists(st.lists(st.integers(0, ALPHA), max_size=40), min_size=1, max_size=6),
    max_depth=st.integers(1, 10),
    ctx=st.lists(st.integers(0, ALPHA), max_size=12),
    max_tokens=st.integers(0, 12),
    top_k=st.integers(1, 4),
    min_prob=st.sampled_from([0.0, 0.05, 0.1, 0.3, 1.0]),
    max_match=st.integers(0, 8),
)
def test_speculate_properties_and_impls_agree(
    lists: list[list[int]],
    max_depth: int,
    ctx: list[int],
    max_tokens: int,
    top_k: int,
    min_prob: float,
    max_match: int,
) -> None:
    seqs = dict(enumerate(lists))
    counts = bf_all_counts(lists, max_depth)
    results = []
    for impl in IMPLS:
        tree = interleaved_build(impl, max_depth, seqs, random.Random(2))
        r = tree.speculate(
            ctx, max_tokens=max_tokens, top_k_paths=top_k, min_prob=min_prob, max_match=max_match
        )
        assert r.match_len == bf_match(counts, ctx, max_match, max_depth)
        check_draft(r, counts, ctx, max_depth, max_tokens, top_k, min_prob)
        results.append(r)
    for r in results[1:]:
        assert r.token_ids == results[0].token_ids and r.parents == results[0].parents
        assert r.match_len == results[0].match_len
        assert all(abs(a - b) <= 1e-9 for a, b in zip(r.probs, results[0].probs, strict=True))


@pytest.mark.skipif(CompiledSuffixTree is None, reason="no compiled core")
def test_impls_agree_on_larger_random_trees() -> None:
    """Longer sequences with shared segments, big fan-out (binary-search children)."""
    assert CompiledSuffixTree is not None
    rng = random.Random(7)
    shared = [rng.randrange(40) for _ in range(60)]
    seqs = {}
    for sid in range(8):
        toks: list[int] = []
        while len(toks) < 300:
            if rng.random() < 0.3:
                a = rng.randrange(len(shared) - 10)
                toks += shared[a : a + rng.randint(3, 20)]
            else:
                toks.append(rng.randrange(40))
        seqs[sid] = toks
    py = interleaved_build(PySuffixTree, 12, seqs, random.Random(3))
    cc = interleaved_build(CompiledSuffixTree, 12, seqs, random.Random(3))
    assert py.num_tokens == cc.num_tokens
    for _ in range(300):
        sid = rng.randrange(8)
        i = rng.randrange(1, 300)
        ctx = seqs[sid][max(0, i - 20) : i]
        for top_k, min_prob in ((1, 0.1), (4, 0.1), (3, 0.0), (8, 0.02)):
            kw = {"max_tokens": 10, "top_k_paths": top_k, "min_prob": min_prob, "max_match": 16}
            a, b = py.speculate(ctx, **kw), cc.speculate(ctx, **kw)  # type: ignore[arg-type]
            assert (a.token_ids, a.parents, a.match_len) == (b.token_ids, b.parents, b.match_len)
            assert a.probs == pytest.approx(b.probs, abs=1e-12)
        pat = ctx[-rng.randint(1, 12) :] if ctx else [1]
        assert py.count(pat) == cc.count(pat)
        assert py.continuations(pat) == cc.continuations(pat)
    for sid in (1, 4, 6):
        py.remove(sid)
        cc.remove(sid)
    for t in range(40):
        assert py.continuations([t]) == cc.continuations([t])
    assert py.continuations([]) == cc.continuations([])


@impl_param
def test_draft_examples(impl: Impl) -> None:
    tree = impl(4)
    tree.append(1, [0, 1, 0, 1, 2])
    assert tree.count([0, 1]) == 2
    assert tree.continuations([0]) == {1: 2}
    assert tree.continuations([0, 1, 0, 1]) == {}  # at max_depth
    r = tree.speculate([0, 1], max_tokens=5, top_k_paths=2)
    assert r == SpecResult((0, 1, 2), (-1, 0, -1), (0.5, 0.5, 0.5), 1.5, 2)
    chain = tree.speculate([0, 1], max_tokens=5)
    assert chain == SpecResult((0, 1), (-1, 0), (0.5, 0.5), 1.0, 2)
    assert tree.speculate([0, 1], max_tokens=0) == SpecResult((), (), (), 0.0, 2)
    assert tree.speculate([0, 1], max_tokens=5, min_prob=0.6).token_ids == ()
    # an occurrence only at a sequence's end does not match: [1, 2] ends sequence 1
    assert tree.match_len([1, 2], 8) == 0
    assert tree.speculate([7], max_tokens=3) == SpecResult((), (), (), 0.0, 0)


# --- interface ----------------------------------------------------------------------------


def public_members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


@impl_param
def test_interface_members_and_argument_names(impl: Impl) -> None:
    """Both implementations have every member of the interface and take its keywords
    (keyword-only where it says so)."""
    tree = impl(max_depth=4)
    assert public_members(SuffixTreeLike) <= set(dir(tree))
    tree.append(seq_id=1, token_ids=[1, 2, 1, 3])
    assert tree.count(pattern=[1]) == 2 and tree.continuations(pattern=[1]) == {2: 1, 3: 1}
    assert tree.has_sequence(seq_id=1) and tree.seq_len(seq_id=1) == 4
    assert tree.tokens(seq_id=1) == [1, 2, 1, 3]
    assert tree.match_len(context=[1], max_match=2) == 1
    r = tree.speculate(context=[1], max_tokens=2, top_k_paths=2, min_prob=0.1, max_match=2)
    assert type(r) is SpecResult and r == SpecResult((2, 1), (-1, 0), (0.5, 0.5), 1.0, 1)
    m = tree.matcher(max_match=2, slack=1)
    assert public_members(MatcherLike) <= set(dir(m))
    m.feed(token_ids=[1])
    assert m.speculate(max_tokens=2, top_k_paths=2, min_prob=0.1) == r
    with pytest.raises(TypeError):
        tree.speculate([1], 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.speculate(2)  # type: ignore[misc]
    tree.remove(seq_id=1)
    assert tree.num_sequences == 0


# --- bad input ----------------------------------------------------------------------------


@impl_param
def test_bad_input(impl: Impl) -> None:
    with pytest.raises(ValueError):
        impl(0)
    tree = impl(4)
    tree.append(-5, [1, 2, 3])
    assert tree.seq_ids() == [-5]
    for bad in ([-1], [2**31], [2**70]):
        with pytest.raises(ValueError):
            tree.append(-5, bad)
    assert tree.tokens(-5) == [1, 2, 3]
    with pytest.raises(TypeError):
        tree.append(-5, [1.5])  # type: ignore[list-item]
    for pattern in ([], [1, 2, 3, 4, 5]):
        with pytest.raises(ValueError):
            tree.count(pattern)
    for sid_call in (tree.remove, tree.seq_len, tree.tokens):
        with pytest.raises(KeyError):
            sid_call(99)
    assert not tree.has_sequence(99)
    for kw in ({"max_tokens": -1}, {"max_tokens": 2, "top_k_paths": 0}):
        with pytest.raises(ValueError):
            tree.speculate([1], **kw)
    for mp in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            tree.speculate([1], max_tokens=2, min_prob=mp)
    with pytest.raises(ValueError):
        tree.match_len([1], -1)
    m = tree.matcher()
    with pytest.raises(ValueError):
        m.speculate(max_tokens=-1)
    with pytest.raises(ValueError):
        tree.matcher(-1)
    with pytest.raises(ValueError):
        tree.matcher(4, -1)
    tree.append(7, [])
    assert tree.has_sequence(7) and tree.seq_len(7) == 0


# --- fallback and bench -------------------------------------------------------------------


def test_fallback_without_compiled_core() -> None:
    code = (
        "import sys; sys.modules['actors.drafts._suffix_tree'] = None\n"
        "import actors.drafts.suffix_tree as m\n"
        "assert not m.HAVE_COMPILED_CORE\n"
        "assert m.SuffixTree is m.PySuffixTree and m.SUFFIX_TREE_IMPL == 'python'\n"
        "t = m.SuffixTree(8); t.append(1, [1, 2, 3]); assert t.count([2]) == 1\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "suffix_tree_fallback" in out.stdout + out.stderr


@pytest.mark.parametrize("impl", ["auto", "python"])
def test_bench_core_smoke(impl: str) -> None:
    seqs = similar_sequences(3, 120, vocab=30, seed=1)
    res = bench_core(seqs, max_depth=16, repeats=1, num_samples=20, impl=impl)
    assert res["num_tokens"] == 360
    assert res["impl"] == ("python" if impl == "python" or not HAVE_COMPILED_CORE else "cpp")
    for key in ("append_tok_per_s", "speculate_us", "speculate_us_chain"):
        assert isinstance(res[key], float) and res[key] > 0
