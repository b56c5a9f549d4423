"""StepProfile: measured verify-step time T(B, g) over a grid, interpolated.

At start-up the engine times one full step (forward plus token choice) for each batch size
B and chain-draft length g of the grid, at a fixed context length, on a scratch KV cache of
its own (running requests are never touched), and keeps each point's median over a few
repeats. The repeats run in rounds, each round timing every point once (a warm-up round
first, then alternately forward and back over the grid), so a machine that slows down or
speeds up while the profile runs shifts every point alike: the policy decides on
T(B, g) / T(B, 0), and points timed one after the other moved that ratio by 2x on a
shared 2-core host (T(4, 8) / T(4, 0) measured 1.4-4.8 by the 12 generators of two
validation runs).
``seconds(B, g)`` interpolates bilinearly; g is clamped to the grid, and a batch above the
grid scales the largest measured batch linearly. The speculation policy reads it to decide
whether a draft pays (T(B, g) against T(B, 0) and the expected accepted length).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from actors.generator.builtin.kv_cache import KVCache
from actors.generator.builtin.runner import ModelRunner, Segment
from actors.generator.builtin.sampler import SamplingBatch, choose_tokens
from actors.model.llama import LlamaModel
from actors.model.packed import PackedWeights


class StepProfile:
    def __init__(
        self, batches: Sequence[int], draft_lens: Sequence[int], seconds: np.ndarray
    ) -> None:
        self.batches = np.asarray(sorted(batches), dtype=np.float64)
        self.draft_lens = np.asarray(sorted(draft_lens), dtype=np.float64)
        self.table = seconds  # (len(batches), len(draft_lens))

    @classmethod
    def measure(
        cls,
        model: LlamaModel,
        batches: Sequence[int],
        draft_lens: Sequence[int],
        context: int,
        repeats: int,
        packed: PackedWeights | None = None,
    ) -> StepProfile:
        """``packed``: the engine's packed weights, timed as its steps run (None: the plain
        modules)."""
        batches, draft_lens = sorted(set(batches)), sorted(set(draft_lens))
        param = next(model.parameters())
        capacity = context + max(draft_lens) + 1
        cache = KVCache(model.config, max(batches), capacity, param.dtype, param.device)
        runner = ModelRunner(model, cache, packed)
        probes = [_Probe.build(runner, b, g, context) for b in batches for g in draft_lens]
        samples: list[list[float]] = [[] for _ in probes]
        for round_ in range(repeats + 1):  # round 0 warms up
            order = list(range(len(probes)))
            if round_ % 2 == 0:
                order.reverse()
            for k in order:
                took = _timed(probes[k])
                if round_:
                    samples[k].append(took)
        medians = [float(np.median(t)) for t in samples]
        table = np.asarray(medians).reshape(len(batches), len(draft_lens))
        return cls(batches, draft_lens, table)

    def seconds(self, batch: int, draft_len: int) -> float:
        scale = 1.0
        b = float(batch)
        if b > self.batches[-1]:
            scale, b = b / self.batches[-1], self.batches[-1]
        per_g = [np.interp(b, self.batches, self.table[:, j]) for j in range(len(self.draft_lens))]
        return float(np.interp(float(draft_len), self.draft_lens, per_g)) * scale

    def as_rows(self) -> list[dict[str, float]]:
        return [
            {"batch": int(b), "draft_len": int(g), "step_ms": 1e3 * float(self.table[i, j])}
            for i, b in enumerate(self.batches)
            for j, g in enumerate(self.draft_lens)
        ]


@dataclass(frozen=True)
class _Probe:
    """One step to time: ``batch`` rows at ``context`` cached tokens, each verifying a
    chain of ``g`` draft tokens."""

    runner: ModelRunner
    batch: int
    g: int
    segments: list[Segment]
    sampling: SamplingBatch

    @classmethod
    def build(cls, runner: ModelRunner, batch: int, g: int, context: int) -> _Probe:
        vocab = runner.model.config.vocab_size
        gen = torch.Generator().manual_seed(batch * 131 + g)
        ids = torch.randint(0, vocab, (batch, g + 1), generator=gen).tolist()
        segments = [Segment(context, row, list(range(context, context + g + 1))) for row in ids]
        n = batch * (g + 1)
        sampling = SamplingBatch.build([1.0] * n, [0] * n, [1.0] * n, [7] * n, list(range(n)))
        return cls(runner, batch, g, segments, sampling)

    def run(self) -> None:
        choose_tokens(self.runner.forward(0, self.segments), self.sampling)


def _timed(probe: _Probe) -> float:
    start = time.perf_counter()
    probe.run()
    return time.perf_counter() - start
