"""Micro-benchmark of the suffix tree core (`actors.drafts.suffix_tree`): append and speculate.

- append: one tree built from the sequences interleaved like siblings streaming tokens
  (``batch`` tokens per ``append`` call, round-robin across sequences); tokens/s over the
  whole build.
- speculate: at sampled positions of those sequences, a matcher fed the preceding context
  (untimed), then timed: ``feed`` of the next token + ``speculate(max_tokens=8, ...)`` with
  4 paths (``speculate_us``) and as a chain (``speculate_us_chain``); microseconds per call,
  Python call overhead included.

Each figure is the median of ``repeats`` runs. ``similar_sequences`` makes test data:
random walks over a vocabulary with segments copied from a shared pool (like sibling
responses to one prompt).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

from actors.drafts.suffix_tree import (
    HAVE_COMPILED_CORE,
    PySuffixTree,
    SuffixTree,
    SuffixTreeLike,
)

__all__ = ["bench_core", "similar_sequences"]


def similar_sequences(
    num: int = 16,
    length: int = 4000,
    *,
    vocab: int = 259,
    shared_frac: float = 0.6,
    seed: int = 0,
) -> list[list[int]]:
    """``num`` sequences of ``length`` tokens: random-walk tokens mixed with segments
    (8-64 tokens) copied from a pool shared by all sequences (``shared_frac`` of tokens)."""
    rng = random.Random(seed)

    def walk(n: int, start: int) -> list[int]:
        out, t = [], start
        for _ in range(n):
            t = (t + rng.randint(-3, 3)) % vocab if rng.random() < 0.8 else rng.randrange(vocab)
            out.append(t)
        return out

    pool = walk(max(256, length // 2), rng.randrange(vocab))
    seqs = []
    for _ in range(num):
        toks: list[int] = []
        while len(toks) < length:
            if rng.random() < shared_frac:
                n = rng.randint(8, 64)
                a = rng.randrange(len(pool) - n)
                toks += pool[a : a + n]
            else:
                toks += walk(rng.randint(4, 32), toks[-1] if toks else rng.randrange(vocab))
        seqs.append(toks[:length])
    return seqs


def _build(
    cls: type[SuffixTreeLike], sequences: Sequence[Sequence[int]], max_depth: int, batch: int
) -> tuple[SuffixTreeLike, float]:
    chunks = [[list(s[i : i + batch]) for i in range(0, len(s), batch)] for s in sequences]
    order = [
        (sid, c[r])
        for r in range(max(map(len, chunks), default=0))
        for sid, c in enumerate(chunks)
        if r < len(c)
    ]
    tree = cls(max_depth)
    start = time.perf_counter()
    for sid, toks in order:
        tree.append(sid, toks)
    return tree, time.perf_counter() - start


def _spec_time(
    tree: SuffixTreeLike,
    samples: list[tuple[list[int], int]],
    top_k_paths: int,
    max_match: int,
) -> float:
    matchers = []
    for ctx, _ in samples:
        m = tree.matcher(max_match)
        m.feed(ctx)
        matchers.append(m)
    start = time.perf_counter()
    for m, (_, nxt) in zip(matchers, samples, strict=True):
        m.feed([nxt])
        m.speculate(max_tokens=8, top_k_paths=top_k_paths)
    return (time.perf_counter() - start) / max(1, len(samples)) * 1e6


def bench_core(
    sequences: list[list[int]],
    *,
    max_depth: int = 64,
    repeats: int = 3,
    batch: int = 8,
    num_samples: int = 2000,
    max_match: int = 32,
    impl: str = "auto",
    seed: int = 0,
) -> dict[str, float | int | str]:
    """Median append tokens/s and speculate microseconds (see the module docstring).

    ``impl``: "auto" (the selected ``SuffixTree``), "cpp" or "python".
    """
    if impl == "python":
        cls: type[SuffixTreeLike] = PySuffixTree
    elif impl == "cpp" and not HAVE_COMPILED_CORE:
        raise RuntimeError("the compiled suffix tree is not built")
    else:
        cls = SuffixTree
    name = "python" if cls is PySuffixTree else "cpp"
    num_tokens = sum(map(len, sequences))
    rng = random.Random(seed)
    candidates = [(i, p) for i, s in enumerate(sequences) for p in range(1, len(s))]
    picks = rng.sample(candidates, min(num_samples, len(candidates)))
    samples = [
        (list(sequences[i][max(0, p - max_match) : p - 1]), sequences[i][p - 1]) for i, p in picks
    ]
    append_rates: list[float] = []
    spec: list[float] = []
    chain: list[float] = []
    tree: SuffixTreeLike | None = None
    for _ in range(max(1, repeats)):
        tree, secs = _build(cls, sequences, max_depth, batch)
        append_rates.append(num_tokens / secs if secs > 0 else float("inf"))
        spec.append(_spec_time(tree, samples, 4, max_match))
        chain.append(_spec_time(tree, samples, 1, max_match))
    assert tree is not None
    return {
        "append_tok_per_s": statistics.median(append_rates),
        "speculate_us": statistics.median(spec),
        "speculate_us_chain": statistics.median(chain),
        "num_tokens": num_tokens,
        "num_sequences": len(sequences),
        "num_nodes": tree.num_nodes,
        "max_depth": max_depth,
        "impl": name,
    }
