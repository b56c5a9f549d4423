"""`seer profile`: measure the built-in engine on this machine into a cost table.

Writes the simulator's table format (``pipeline.sim.costmodel``), shape ``builtin-cpu``:
- decode rows: whole engine steps (``TorchEngine.step``: forward, token choice and the
  engine's bookkeeping) with B requests decoding at about ``ctx`` tokens of context each
  and nothing prefilling, median over the steps of a short run. For g > 0 the g = 0 step is
  scaled by the bare forward's T(B, g) / T(B, 0) (``StepProfile``), since driving real
  drafts through the engine needs a draft source.
- prefill rows: engine steps that only prefill one request of ``tokens`` new tokens (at
  most ``max_prefill_tokens`` per step, as the engine chunks prefill).
``--quick``: a small grid for the validation workload (well under a minute on 2 cores).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from actors.generator import ChunkRequest, GeneratorOptions, SamplingParams
from actors.generator.builtin import StepProfile, build_torch_engine
from actors.generator.builtin.torch_engine import TorchEngine
from pipeline.config import build_options

__all__ = ["SHAPE", "profile_engine", "run"]

SHAPE = "builtin-cpu"


def _engine(gen: dict[str, Any]) -> TorchEngine:
    opts = build_options(
        GeneratorOptions, {**gen, "kv_budget_tokens": 1 << 20, "profile": False}, "generator"
    )
    return build_torch_engine(opts)


def _decode_ms(engine: TorchEngine, batch: int, ctx: int, steps: int) -> float:
    greedy = SamplingParams(temperature=1.0, ignore_eos=True, seed=1)
    prompt = tuple((7 * i) % 250 for i in range(ctx))
    # enough tokens that every request is still decoding once the last prefill is done
    budget = steps + -(-batch * ctx // engine.config.max_prefill_tokens) + 2
    for i in range(batch):
        engine.add(ChunkRequest(f"d{batch}-{ctx}-{i}", prompt, budget, params=greedy))
    times = []
    while engine.has_work():
        start = time.perf_counter()
        result = engine.step()
        elapsed = time.perf_counter() - start
        if result.num_decode_rows == batch and not result.num_prefill_tokens:
            times.append(elapsed)
    if not times:
        raise RuntimeError(f"profile: no step decoded all {batch} requests at context {ctx}")
    return 1e3 * statistics.median(times[:steps])


def _prefill_ms(engine: TorchEngine, tokens: int) -> float:
    prompt = tuple((3 * i) % 250 for i in range(tokens))
    total = []
    for rep in range(3):
        engine.add(ChunkRequest(f"p{tokens}-{rep}", prompt, 1, params=SamplingParams(seed=1)))
        spent = 0.0
        while engine.has_work():
            start = time.perf_counter()
            result = engine.step()
            if result.num_prefill_tokens and not result.num_decode_rows:
                spent += time.perf_counter() - start
        total.append(spent)
    return 1e3 * statistics.median(total)


def profile_engine(
    gen: dict[str, Any],
    *,
    batches: tuple[int, ...],
    contexts: tuple[int, ...],
    draft_lens: tuple[int, ...] = (0, 1, 2, 4, 8),
    prefills: tuple[int, ...] = (16, 64, 256, 512),
    steps: int = 12,
) -> dict[str, Any]:
    engine = _engine(gen)
    _decode_ms(engine, 2, 16, 4)  # warm up
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for ctx in contexts:
        ratios = StepProfile.measure(engine.model, batches, draft_lens, ctx, repeats=3)
        for b in batches:
            base = _decode_ms(engine, b, ctx, steps)
            t0 = ratios.seconds(b, 0)
            for g in draft_lens:
                ms = base * ratios.seconds(b, g) / t0
                rows.append(
                    {"shape": SHAPE, "kind": "decode", "B": b, "g": g, "ctx": ctx, "ms": ms}
                )
    for n in prefills:
        ms = _prefill_ms(engine, n)
        rows.append({"shape": SHAPE, "kind": "prefill", "B": 1, "tokens": n, "ms": ms})
    info = {
        "device": "cpu (this machine)",
        "generator": gen,
        "seconds": time.perf_counter() - start,
    }
    return {"info": info, "rows": rows}


def run(json_path: str, quick: bool = False, gen: dict[str, Any] | None = None) -> dict[str, Any]:
    from pipeline.bench.rollout import bench_generator

    gen = gen or bench_generator(quick)
    if quick:
        table = profile_engine(
            gen, batches=(1, 2, 4, 8, 16), contexts=(32, 256), prefills=(16, 64, 256), steps=8
        )
    else:
        table = profile_engine(
            gen, batches=(1, 2, 4, 8, 16, 32), contexts=(32, 128, 256, 512, 900), steps=16
        )
    path = Path(json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1))
    print(f"wrote {len(table['rows'])} rows to {path} in {table['info']['seconds']:.1f} s")
    return table
