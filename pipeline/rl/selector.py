"""Earl's parallelism selector: the generator layout that a profile says is fastest at the
running average context length, switched between iterations.

A ``Layout`` is (instances, threads per instance) for the built-in CPU engine, where intra-op
threads split each matmul the way tensor parallelism splits it across GPUs; every candidate
uses the same total cores; for SGLang generators that launch their servers the pair is
(servers, ``--tp-size`` per server), applied by ``pipeline.rl.layout_switch``. A
``LayoutProfile`` holds measured rollout throughput per (layout, context bucket); the best
layout of a bucket is the one with the highest throughput there. ``ParallelismSelector``
keeps the running average context length (prompt + output, as the trainer sees the sample:
a multi-turn episode's whole trajectory, observations included) of the last ``window``
finished samples (``average_context_len``, from the rollout results the driver holds:
``pipeline.rl.loop.context_lens``) and, between iterations, names the bucket's best layout
when it differs from the current one. The caller restarts the generators with it
(``pipeline.rl.loop``), which re-publishes the current weights.
Pure: no sockets, no clocks.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ProfileError(ValueError):
    """A profile is empty, malformed, or misses a (layout, bucket) measurement."""


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    instances: int
    threads: int  # per instance (CPU intra-op threads), or tp-size per SGLang server

    def __post_init__(self) -> None:
        if self.instances < 1 or self.threads < 1:
            raise ProfileError(f"layout needs instances >= 1 and threads >= 1, got {self}")

    @property
    def name(self) -> str:
        return f"{self.instances}x{self.threads}"

    @property
    def total(self) -> int:
        return self.instances * self.threads

    @classmethod
    def parse(cls, text: str) -> Layout:
        try:
            instances, threads = (int(x) for x in text.lower().split("x"))
        except ValueError:
            raise ProfileError(f"layout {text!r} is not INSTANCESxTHREADS, e.g. 2x1") from None
        return cls(instances, threads)


def layouts_for(total: int) -> list[Layout]:
    """Every (instances, threads) with instances * threads == total."""
    return [Layout(i, total // i) for i in range(1, total + 1) if total % i == 0]


@dataclass(frozen=True, slots=True)
class ProfileRow:
    layout: Layout
    ctx: int
    batch: int
    throughput_tok_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.name,
            "ctx": self.ctx,
            "batch": self.batch,
            "throughput_tok_s": self.throughput_tok_s,
        }


class LayoutProfile:
    """Throughput per (layout, context bucket); every layout measured at every bucket."""

    def __init__(self, rows: Iterable[ProfileRow]) -> None:
        self.rows = list(rows)
        if not self.rows:
            raise ProfileError("empty layout profile")
        self.buckets = sorted({r.ctx for r in self.rows})
        self.layouts = sorted({r.layout for r in self.rows})
        self._tput = {(r.layout, r.ctx): r.throughput_tok_s for r in self.rows}
        missing = [(lay.name, c) for lay in self.layouts for c in self.buckets
                   if (lay, c) not in self._tput]  # fmt: skip
        if missing:
            raise ProfileError(f"profile misses (layout, ctx) {missing[:4]}")

    def throughput(self, layout: Layout, ctx: int) -> float:
        return self._tput[(layout, ctx)]

    def bucket_of(self, context_len: float) -> int:
        """The smallest bucket that holds ``context_len`` (the largest beyond them all)."""
        return next((b for b in self.buckets if context_len <= b), self.buckets[-1])

    def best(self, ctx: int) -> Layout:
        return max(self.layouts, key=lambda lay: (self._tput[(lay, ctx)], -lay.instances))

    def worst(self, ctx: int) -> Layout:
        return min(self.layouts, key=lambda lay: (self._tput[(lay, ctx)], lay.instances))

    def choice(self) -> dict[int, Layout]:
        return {c: self.best(c) for c in self.buckets}

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": [r.to_dict() for r in self.rows],
            "choice": {str(c): lay.name for c, lay in self.choice().items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayoutProfile:
        try:
            return cls(
                ProfileRow(
                    Layout.parse(str(r["layout"])),
                    int(r["ctx"]),
                    int(r["batch"]),
                    float(r["throughput_tok_s"]),
                )
                for r in data["profile"]
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"malformed layout profile: {exc!r}") from exc

    @classmethod
    def load(cls, path: str | Path) -> LayoutProfile:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ProfileError(f"cannot read layout profile {path}: {exc}") from exc
        return cls.from_json(data)


class ParallelismSelector:
    """Follows the running average context length; names a new layout when its bucket's
    best differs from the current one."""

    def __init__(self, profile: LayoutProfile, current: Layout, window: int = 512) -> None:
        if current.total != profile.layouts[0].total:
            raise ProfileError(f"layout {current.name} uses other cores than the profile's")
        self.profile = profile
        self.current = current
        self._contexts: deque[int] = deque(maxlen=window)
        self.num_switches = 0

    def observe(self, context_lens: Sequence[int]) -> None:
        """Context lengths of finished samples: prompt + output (for an episode, its
        whole trajectory: actions and observations)."""
        self._contexts.extend(int(c) for c in context_lens)

    @property
    def average_context_len(self) -> float:
        return sum(self._contexts) / len(self._contexts) if self._contexts else 0.0

    @property
    def bucket(self) -> int:
        return self.profile.bucket_of(self.average_context_len)

    def decide(self) -> Layout | None:
        """The layout to switch to before the next rollout, or None to keep the current."""
        if not self._contexts:
            return None
        best = self.profile.best(self.bucket)
        if best == self.current:
            return None
        self.current = best
        self.num_switches += 1
        return best
