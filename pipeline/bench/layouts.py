"""`seer bench layouts`: Earl's parallelism selector on the built-in CPU engine.

A generator layout here is (instances, intra-op threads per instance) with the same total
cores: on 2 cores, 2 x 1 (two generators of one thread) and 1 x 2 (one generator whose
matmuls two threads split, the CPU analogue of tensor parallelism). Profile: for each
layout, one rollout per context bucket -- 16 requests (2 prompts x 8) of `ctx - 32` prompt
tokens and 32 forced output tokens, so every token is generated near context `ctx` -- on
the default model shape (hidden 128, 4 layers, random weights, speculation off);
throughput = output tokens / wall seconds (prefill included). Buckets are 128 / 256 / 512
tokens (not 2K / 8K: the CPU profile must stay quick, and the run's model holds 512). Then
the choice per bucket and, in a second start of each layout, one fresh rollout per bucket
(other prompts and seeds) under the chosen layout and under the worst: `gain` = chosen /
worst throughput from that second measurement.

`--backend sglang`: the same with SGLang layouts, (servers, `--tp-size` per server): each
generator launches a `seer serve` (our SGLang-compatible server, where `--tp-size N` is N
intra-op threads) and drives it over HTTP; 2 x 1 is two servers of tp 1, 1 x 2 one server of
tp 2. Throughput then includes the HTTP hop; each layout's servers start before its warm-up.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import numpy as np

from pipeline.launch.backend import SEER_SERVE_COMMAND
from pipeline.records.report import write_results
from pipeline.rl.selector import Layout, LayoutProfile, ProfileRow, layouts_for
from pipeline.rollout import Rollout
from pipeline.rollout.api import rollout_config
from transport.messages import PromptSpec, SamplingSpec

BUCKETS = (128, 256, 512)
NUM_PROMPTS, GROUP_SIZE = 2, 8
TOTAL_CORES = 2
OUTPUT_TOKENS = 32
MODEL = {"max_context": 1024}


def prompts(ctx: int, seed: int) -> list[PromptSpec]:
    rng = np.random.default_rng(seed)
    return [
        PromptSpec(
            prompt_id=f"c{ctx}-{seed}-{i}",
            token_ids=tuple(int(t) for t in rng.integers(0, 256, ctx - OUTPUT_TOKENS)),
            forced_lens=(OUTPUT_TOKENS,) * GROUP_SIZE,
        )
        for i in range(NUM_PROMPTS)
    ]


def generator_options(layout: Layout, backend: str) -> dict[str, Any]:
    """The generators of `layout`: built-in engines of `threads` threads, or generators that
    each launch a `seer serve` with `--tp-size threads`."""
    gen: dict[str, Any] = {"model": MODEL, "spec": {"mode": "off"}}
    if backend == "builtin":
        return gen | {"num_threads": layout.threads}
    sglang = {"command": SEER_SERVE_COMMAND, "base_port": 0, "tp_size": layout.threads}
    return gen | {"backend": "sglang", "sglang": sglang, "max_batch": NUM_PROMPTS * GROUP_SIZE}


async def measure_layout(
    layout: Layout, buckets: tuple[int, ...], seed: int, backend: str = "builtin"
) -> dict[int, float]:
    """Throughput (output tokens / s) of one rollout per bucket under `layout`."""
    gen = generator_options(layout, backend)
    config = rollout_config(num_generators=layout.instances, generator=gen)
    out: dict[int, float] = {}
    async with Rollout(config) as rollout:
        warm = SamplingSpec(max_new_tokens=4, ignore_eos=True)
        await rollout.generate([(1, 2, 3)] * layout.instances, 2, warm)
        for ctx in buckets:
            sampling = SamplingSpec(seed=seed, ignore_eos=True, max_new_tokens=OUTPUT_TOKENS)
            start = time.perf_counter()
            groups = await rollout.generate(prompts(ctx, seed), GROUP_SIZE, sampling)
            seconds = time.perf_counter() - start
            tokens = sum(len(s.token_ids) for g in groups for s in g.samples)
            out[ctx] = tokens / seconds
    return out


async def measure(buckets: tuple[int, ...], backend: str = "builtin") -> dict[str, Any]:
    layouts = layouts_for(TOTAL_CORES)
    rows = []
    for layout in layouts:
        tput = await measure_layout(layout, buckets, seed=1, backend=backend)
        rows += [ProfileRow(layout, ctx, NUM_PROMPTS * GROUP_SIZE, t) for ctx, t in tput.items()]
    profile = LayoutProfile(rows)
    check = {lay: await measure_layout(lay, buckets, seed=2, backend=backend) for lay in layouts}
    gain = {
        str(ctx): check[profile.best(ctx)][ctx] / check[profile.worst(ctx)][ctx] for ctx in buckets
    }
    return profile.to_json() | {
        "gain": gain,
        "check": [
            {"layout": lay.name, "ctx": ctx, "throughput_tok_s": t}
            for lay, row in check.items()
            for ctx, t in row.items()
        ],
        "worst": {str(ctx): profile.worst(ctx).name for ctx in buckets},
        "backend": backend,
    }


def run(json_path: str | None, quick: bool = False, backend: str = "builtin") -> dict[str, Any]:
    buckets = (64, 128) if quick else BUCKETS
    result = anyio.run(measure, buckets, backend)
    unit = "servers x tp-size" if backend == "sglang" else "instances x threads"
    print(f"backend {backend}: layouts are {unit}")
    print(f"{'layout':>7} {'ctx':>5} {'batch':>5} {'tok/s':>8}")
    for row in result["profile"]:
        print(
            f"{row['layout']:>7} {row['ctx']:>5} {row['batch']:>5} {row['throughput_tok_s']:>8.0f}"
        )
    print("bucket  chosen  worst  gain (fresh rollout, chosen / worst)")
    for ctx in buckets:
        c = str(ctx)
        print(
            f"{ctx:>6}  {result['choice'][c]:>6}  {result['worst'][c]:>5}  {result['gain'][c]:.2f}x"
        )
    if json_path:
        write_results(json_path, result, indent=1)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench layouts`'s own flags (beside --json and --quick)."""
    parser.add_argument(
        "--backend",
        choices=("builtin", "sglang"),
        default="builtin",
        help="sglang: (servers, --tp-size) layouts of launched seer serve servers",
    )


def run_args(args: argparse.Namespace) -> None:
    """`seer bench layouts` from its parsed flags."""
    run(args.json, quick=args.quick, backend=args.backend)
