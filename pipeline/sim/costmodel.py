"""CostModel: step time T(B, context, g) and prefill time, interpolated from a measured table.

Table format (``seer profile`` writes it; ``data/costmodel_h200*.json`` ship with it)::

    {"info": {...}, "rows": [
        {"shape": str, "kind": "decode", "B": int, "g": int, "ctx": int, "ms": float},
        {"shape": str, "kind": "prefill", "B": 1, "tokens": int, "ms": float}, ...]}

A decode row is one engine step of ``B`` requests, each verifying ``g`` draft tokens, each
with ``ctx`` cached tokens (``info["context"]``: ``"mean"``, the default, the rows' mean
context; ``"max"``, the longest row's, for an engine whose attention pads every row to the
longest: ``batch_context`` picks the one to price a batch with; ``batch_draft`` likewise
its rows' draft lengths).
``decode_s(B, ctx, g)`` interpolates linearly in log2(B), in ctx and in g, and
extrapolates from the last two grid points beyond the grid (linearly in B past the largest
measured batch: the H200 grid stops at B * ctx = 2M, and a larger batch of long
contexts reads proportionally more KV). ``prefill_s(tokens)`` interpolates linearly in
tokens and, when the table measured steps prefilling several requests at once (prefill
rows with ``B`` > 1: per-request work is not free on a CPU), linearly in log2(requests)
between them; a table without prefill rows (the MoE one) prices a prefill token like a
token of the largest measured decode batch at the smallest context (a batched forward over
many tokens).
Step time is made non-decreasing in g (as the speculation policy reads it: a noisy
profile can say a draft costs less than none). Results are cached on a grid of 1/4 draft
token and 1/64 of the context.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "CostModel", "CostModelError", "load_table"]

DATA_DIR = Path(__file__).parent / "data"


class CostModelError(ValueError):
    """A cost table that cannot be used (unknown shape, missing rows, bad values)."""


def load_table(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CostModelError(f"cannot read cost table {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise CostModelError(f"{path}: a cost table is an object with a 'rows' list")
    return data


def _in_batch(lbs: Sequence[float], ys: Sequence[float], batch: int) -> float:
    """Interpolate in log2(B) inside the measured batches; beyond the largest, extrapolate
    linearly in B itself (a bigger batch reads proportionally more KV)."""
    lb = math.log2(batch)
    if lb <= lbs[-1] or len(lbs) == 1:
        return _interp(lbs, ys, lb)
    b0, b1 = 2 ** lbs[-2], 2 ** lbs[-1]
    return ys[-1] + (ys[-1] - ys[-2]) * (batch - b1) / (b1 - b0)


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear through (xs, ys) (xs ascending), extrapolated from the end segments."""
    if len(xs) == 1:
        return ys[0]
    i = min(max(bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


CONTEXTS = ("mean", "max")


class CostModel:
    def __init__(
        self, rows: Sequence[dict[str, Any]], shape: str, *, context: str = "mean"
    ) -> None:
        if context not in CONTEXTS:
            raise CostModelError(f"context must be one of {CONTEXTS}, got {context!r}")
        self.context = context
        self.speed = 1.0  # every step costs this many times the table's price (`scaled`)
        decode = [r for r in rows if r.get("shape") == shape and r.get("kind") == "decode"]
        if not decode:
            shapes = sorted({str(r.get("shape")) for r in rows})
            raise CostModelError(f"no decode rows for shape {shape!r}; the table has {shapes}")
        self.shape = shape
        # (g, ctx) -> ([log2 B], [ms]) ascending in B
        grid: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for r in decode:
            b, g, ctx, ms = int(r["B"]), int(r["g"]), int(r["ctx"]), float(r["ms"])
            if b < 1 or g < 0 or ctx < 1 or not ms > 0:
                raise CostModelError(f"bad decode row {r}")
            grid.setdefault((g, ctx), []).append((math.log2(b), ms))
        self.draft_lens = sorted({g for g, _ in grid})
        self.contexts = sorted({c for _, c in grid})
        self._grid = {
            k: (tuple(x for x, _ in sorted(v)), tuple(y for _, y in sorted(v)))
            for k, v in grid.items()
        }
        for g in self.draft_lens:
            for c in self.contexts:
                if (g, c) not in self._grid:
                    raise CostModelError(f"shape {shape!r}: no decode rows for g={g}, ctx={c}")
        by_segments: dict[int, list[tuple[float, float]]] = {}
        for r in rows:
            if r.get("shape") == shape and r.get("kind") == "prefill":
                b, ms = int(r.get("B", 1)), float(r["ms"])
                if b < 1 or not ms > 0:
                    raise CostModelError(f"bad prefill row {r}")
                by_segments.setdefault(b, []).append((float(r["tokens"]), ms))
        # requests prefilled in one step -> ([0, total tokens...], [0, ms...])
        self._prefill: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {
            b: ((0.0, *(t for t, _ in sorted(v))), (0.0, *(ms for _, ms in sorted(v))))
            for b, v in by_segments.items()
        }
        if not self._prefill:
            xs, ys = self._grid[(0, self.contexts[0])]
            per_token = ys[-1] / 2 ** xs[-1]
            self._prefill = {1: ((0.0, 1.0), (0.0, per_token))}
        self._segments = sorted(self._prefill)
        self.max_batch = int(2 ** max(max(xs) for xs, _ in self._grid.values()))
        self._cached = lru_cache(maxsize=1 << 16)(self._decode_ms)

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (replays run in worker processes): the price cache is rebuilt."""
        return {k: v for k, v in self.__dict__.items() if k != "_cached"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cached = lru_cache(maxsize=1 << 16)(self._decode_ms)

    def __copy__(self) -> CostModel:
        out = object.__new__(CostModel)
        out.__dict__.update(self.__dict__)  # the cache too (prices are per table)
        return out

    @classmethod
    def from_table(cls, data: dict[str, Any], shape: str) -> CostModel:
        """A loaded table; its ``info["context"]`` says what a decode row's ctx is."""
        info = data.get("info") or {}
        return cls(data["rows"], shape, context=str(info.get("context", "mean")))

    @classmethod
    def from_file(cls, path: str | Path, shape: str) -> CostModel:
        return cls.from_table(load_table(path), shape)

    def scaled(self, factor: float) -> CostModel:
        """This table with every step (decode and prefill) costing ``factor`` times its
        price: an instance running slower or faster than the machine the table measured."""
        if not factor > 0:
            raise ValueError(f"factor must be > 0, got {factor}")
        out = copy.copy(self)  # shares the rows and the cache (prices are per table)
        out.speed = self.speed * factor
        return out

    def batch_context(self, contexts: Sequence[float]) -> float:
        """The ``ctx`` to price a decode batch with: its rows' mean context (the H200
        tables: paged attention reads each row's own KV) or its longest (``"max"``: the
        built-in engine pads attention to the longest row)."""
        if not contexts:
            return 0.0
        return max(contexts) if self.context == "max" else sum(contexts) / len(contexts)

    @property
    def pads_drafts(self) -> bool:
        """Whether the priced engine pays for a step's largest draft on every row (``"max"``
        tables): its speculation policy budgets a depth (``MarginalBenefitPolicy``)."""
        return self.context == "max"

    def batch_draft(self, drafts: Sequence[float]) -> float:
        """The per-row draft length ``g`` to price a decode batch with: the rows' mean (the
        H200 tables) or, for ``"max"`` tables, the largest row's: the built-in engine pads
        every row's verify tokens to the longest too (measured: 16 rows at 384 tokens of
        context, 4 drafting 8 tokens and 12 none, took 10.4 ms; all 16 drafting 8, 10.8 ms;
        all drafting 2, the same mean, 6.2 ms)."""
        if not drafts:
            return 0.0
        return max(drafts) if self.context == "max" else sum(drafts) / len(drafts)

    @classmethod
    def builtin(cls, name: str) -> CostModel:
        """A shipped H200 shape: ``qwen2.5-7b``, ``qwen2.5-32b`` or ``moonlight-16b-a3b``."""
        moe = name.startswith("moonlight")
        path = DATA_DIR / ("costmodel_h200_moe.json" if moe else "costmodel_h200.json")
        return cls.from_file(path, name)

    def decode_s(self, batch: int, ctx: float, g: float = 0.0) -> float:
        """One step of ``batch`` requests of mean context ``ctx``, each verifying ``g``
        draft tokens (g may be a mean over the batch)."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        key_ctx = max(int(ctx) >> 6, 0)
        return self._cached(batch, key_ctx, round(max(g, 0.0) * 4)) * self.speed / 1e3

    def _decode_ms(self, batch: int, ctx64: int, g4: int) -> float:
        ctx, g = float(ctx64 << 6) + 32.0, g4 / 4.0
        per_g = []
        for dg in self.draft_lens:
            per_ctx = [_in_batch(*self._grid[(dg, c)], batch) for c in self.contexts]
            per_g.append(_interp(self.contexts, per_ctx, ctx))
        per_g = list(itertools.accumulate(per_g, max))  # a longer draft never costs less
        floor = min(min(ys) for _, ys in self._grid.values()) * 0.5
        return max(_interp(self.draft_lens, per_g, min(g, self.draft_lens[-1])), floor)

    def prefill_s(self, tokens: int, segments: int = 1) -> float:
        """One step prefilling ``tokens`` new tokens in all, of ``segments`` requests:
        linear in tokens per measured request count, then linear in log2(requests) between
        the measured counts (clamped to them)."""
        if tokens <= 0:
            return 0.0
        segs = self._segments
        per = [max(_interp(*self._prefill[b], float(tokens)), 0.0) for b in segs]
        if len(segs) == 1:
            return per[0] * self.speed / 1e3
        x = min(max(math.log2(max(segments, 1)), math.log2(segs[0])), math.log2(segs[-1]))
        return max(_interp([math.log2(b) for b in segs], per, x), 0.0) * self.speed / 1e3
