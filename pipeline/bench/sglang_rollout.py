"""`seer bench rollout --backend sglang`: the rollout bench over SGLang's HTTP API.

The same workload, model, seeds and scheduler run under the four policies twice in one
run: with the built-in engine in the generator processes ("torch") and with backend
"sglang", each generator launching a `seer serve` server (the built-in engine behind
SGLang's HTTP API) and driving it over HTTP. Both topologies are up together and the
rollouts interleave (for each repeat and policy one rollout of each backend, torch first
in even repeats and sglang first in odd ones), so machine drift and order hit both. The
JSON holds `{"backend": {"torch": {...}, "sglang": {...}}}`, each shaped as
`seer bench rollout`'s (`policies`, `ratios`, `costs`), plus `sglang_over_torch`, the
throughput ratio of the medians per policy: the cost of the HTTP path. `paired` adds,
per policy, the ratio of each repeat's two rollouts (run back to back, so a load change
between repeats cancels) with their median, min and max, and each backend's spread of
makespans (max / min - 1). `per_chunk` adds its absolute
cost: the median time of one short chunk (8 greedy tokens after a 16-token prompt) through
the SGLang backend and a `seer serve` process, next to the same chunk in an engine in this
process, measured one at a time on idle engines before the rollouts.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Literal

import anyio
from rich.console import Console
from rich.table import Table

from actors.generator.options import GeneratorOptions
from pipeline.bench.rollout import measure_costs, summarize
from pipeline.records.report import results_table, write_results
from pipeline.records.workload import Workload, describe, make_workload
from pipeline.rollout.api import Rollout, rollout_config
from pipeline.rollout.live import POLICIES, bench_generator
from transport.messages import PromptSpec, RolloutRecord, SamplingSpec

BACKENDS = ("torch", "sglang")
DEFAULT_PREFILL = GeneratorOptions().max_prefill_tokens  # the in-process engine's


def serve_command(gen: dict[str, Any]) -> list[str]:
    """Each generator's `seer serve`, with the built-in generator's engine settings."""
    return [
        "{python}", "-m", "pipeline.cli", "serve", "--model", "{model}",
        "--host", "{host}", "--port", "{port}", "--max-batch", str(gen["max_batch"]),
        "--kv-budget-tokens", str(gen["kv_budget_tokens"]),
        "--max-prefill-tokens", str(gen.get("max_prefill_tokens", DEFAULT_PREFILL)),
        "--num-threads", str(gen.get("num_threads", 1)),
    ]  # fmt: skip


def generators(gen: dict[str, Any]) -> dict[str, dict[str, Any]]:
    torch_gen = {"spec": {"mode": "off"}, **gen}
    sglang = {"command": serve_command(gen), "base_port": 0, "request_timeout_s": 600.0}
    return {"torch": torch_gen, "sglang": {**torch_gen, "backend": "sglang", "sglang": sglang}}


async def run_backends(
    workload: Workload,
    gen: dict[str, Any],
    chunk_size: int,
    console: Console,
    repeats: int,
    policies: tuple[str, ...] = POLICIES,
    mode: Literal["local", "inprocess"] = "local",
) -> dict[str, dict[str, list[RolloutRecord]]]:
    prompts = [
        PromptSpec(prompt_id=p.prompt_id, token_ids=p.token_ids, forced_lens=p.target_lens)
        for p in workload.prompts
    ]
    sampling = SamplingSpec(
        temperature=1.0, seed=workload.seed, ignore_eos=True, max_new_tokens=workload.max_new_tokens
    )
    records: dict[str, dict[str, list[RolloutRecord]]] = {
        b: {p: [] for p in policies} for b in BACKENDS
    }
    configs = {
        # a loaded machine can take minutes to start processes that import torch
        b: dataclasses.replace(
            rollout_config(num_generators=2, chunk_size=chunk_size, generator=g),
            ready_timeout_s=900.0,
        )
        for b, g in generators(gen).items()
    }
    async with (
        Rollout(configs["torch"], mode=mode) as torch_rollout,
        Rollout(configs["sglang"], mode=mode) as sglang_rollout,
    ):
        rollouts = {"torch": torch_rollout, "sglang": sglang_rollout}
        warm = SamplingSpec(max_new_tokens=8, ignore_eos=True)
        for rollout in rollouts.values():
            await rollout.generate([p.token_ids for p in prompts[:2]], 2, warm)
        for r in range(repeats):
            order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]
            for name in policies:
                for backend in order:
                    rollout = rollouts[backend]
                    with console.status(f"rollout {r + 1}/{repeats}: {backend} / {name}"):
                        result = await rollout.generate_with_record(
                            prompts, workload.group_size, sampling, policy=name
                        )
                    records[backend][name].append(result.record)
                    console.print(f"{backend} {name} #{r + 1}: {result.record.makespan_s:.2f} s")
    return records


async def per_chunk_cost(gen: dict[str, Any], num: int = 30) -> dict[str, float]:
    """Median seconds of one short chunk in-process and over HTTP (module docstring)."""
    import statistics
    import time

    from actors.generator import ChunkRequest, GeneratorOptions, SamplingParams
    from actors.generator.builtin import build_torch_engine
    from actors.generator.sglang.engine import SGLangEngine
    from pipeline.config import build_options

    opts = build_options(GeneratorOptions, generators(gen)["sglang"], "generator")
    greedy = SamplingParams(temperature=0.0, ignore_eos=True)
    prompt = tuple(range(16))
    local = build_torch_engine(opts.model, opts.engine_config())
    in_process = []
    for i in range(num):
        start = time.perf_counter()
        local.add(ChunkRequest(f"l{i}", prompt, 8, params=greedy))
        while local.has_work():
            local.step()
        in_process.append(time.perf_counter() - start)
    remote = SGLangEngine(
        opts.sglang, opts.model, eos_token_id=opts.eos_token_id, max_batch=opts.max_batch
    )
    await remote.start()
    try:
        over_http = []
        for i in range(num):
            start = time.perf_counter()
            await remote.generate(ChunkRequest(f"h{i}", prompt, 8, params=greedy))
            over_http.append(time.perf_counter() - start)
    finally:
        await remote.aclose()
    a, b = statistics.median(in_process), statistics.median(over_http)
    return {"in_process_s": a, "over_http_s": b, "http_overhead_s": b - a}


def paired(records: dict[str, dict[str, list[RolloutRecord]]]) -> dict[str, dict[str, Any]]:
    """Per policy: sglang/torch throughput of each repeat's pair (the same tokens, so the
    ratio of makespans inverted), their median, min and max; each backend's makespan
    spread (max / min - 1)."""
    import statistics

    out: dict[str, dict[str, Any]] = {}
    for name, torch_runs in records["torch"].items():
        sglang_runs = records["sglang"][name]
        ratios = [t.makespan_s / s.makespan_s for t, s in zip(torch_runs, sglang_runs, strict=True)]
        spread = {
            b: max(r.makespan_s for r in runs) / min(r.makespan_s for r in runs) - 1
            for b, runs in (("torch", torch_runs), ("sglang", sglang_runs))
        }
        out[name] = {
            "ratios": ratios,
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "makespan_spread": spread,
        }
    return out


def _table(out: dict[str, Any]) -> Table:
    cols = (
        "policy",
        "torch tok/s",
        "sglang tok/s",
        "sglang/torch",
        "paired (min-max)",
        "spread torch / sglang",
        "torch tail s",
        "sglang tail s",
    )
    t, s = out["backend"]["torch"]["policies"], out["backend"]["sglang"]["policies"]
    rows = []
    for name in t:
        pair = out["paired"][name]
        rows.append(
            (
                name,
                f"{t[name]['throughput_tok_s']:.0f}",
                f"{s[name]['throughput_tok_s']:.0f}",
                f"{out['sglang_over_torch'][name]:.2f}x",
                f"{pair['median']:.2f}x ({pair['min']:.2f}-{pair['max']:.2f})",
                f"{pair['makespan_spread']['torch']:.0%} / {pair['makespan_spread']['sglang']:.0%}",
                f"{t[name]['tail_s']:.2f}",
                f"{s[name]['tail_s']:.2f}",
            )
        )
    title = "seer bench rollout --backend sglang (2 generators each; medians)"
    return results_table(title, cols, rows)


def run(
    json_path: str | None = None,
    quick: bool = False,
    chunk_size: int = 128,
    repeats: int | None = None,
    per_chunk_samples: int = 30,
    mode: Literal["local", "inprocess"] = "local",
) -> dict[str, Any]:
    """`mode` "inprocess" runs the actors in this process (tests); the servers stay
    processes."""
    console = Console(width=140)
    repeats = repeats or (1 if quick else 3)
    workload = (
        make_workload(num_groups=8, group_size=4, mean_len=60, max_len=180)
        if quick
        else make_workload()
    )
    shape = describe(workload)
    console.print(
        f"workload: {shape['num_requests']} requests, {shape['total_tokens']} tokens; "
        "backends torch (in-process engine) and sglang (seer serve over HTTP)"
    )
    # neither backend pinned: seer serve's servers place themselves, so the torch side runs
    # as they do (pinned, it would be faster for its placement, not its backend)
    gen = {**bench_generator(quick), "pin_cores": False}
    costs = measure_costs(workload, gen)
    chunk = anyio.run(per_chunk_cost, gen, per_chunk_samples)
    console.print(
        f"one 8-token chunk: {chunk['in_process_s'] * 1e3:.1f} ms in process, "
        f"{chunk['over_http_s'] * 1e3:.1f} ms over HTTP (seer serve), "
        f"{chunk['http_overhead_s'] * 1e3:+.1f} ms"
    )
    records = anyio.run(run_backends, workload, gen, chunk_size, console, repeats, POLICIES, mode)
    backends = {b: summarize(records[b], costs) for b in BACKENDS}
    out: dict[str, Any] = {
        "backend": backends,
        "sglang_over_torch": {
            p: backends["sglang"]["policies"][p]["throughput_tok_s"]
            / backends["torch"]["policies"][p]["throughput_tok_s"]
            for p in backends["torch"]["policies"]
        },
        "paired": paired(records),
        "per_chunk": chunk,
        "workload": shape,
        "generator": gen,
        "sglang_command": serve_command(gen),
        "chunk_size": chunk_size,
        "repeats": repeats,
    }
    console.print(_table(out))
    path = Path(json_path or Path(tempfile.mkdtemp()) / "rollout-sglang-bench.json")
    write_results(path, out, default=float)
    console.print(f"wrote {path}")
    return out
