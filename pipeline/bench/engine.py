"""`seer bench engine`: the built-in TorchEngine's decode speed beside Hugging Face
``generate`` measured in the same run, verify-step cost, and the speed-up from perfect drafts.

Model: a random 3.3M-parameter Llama (hidden 256, 4 layers, 4 heads, vocab 256), on
``threads`` torch threads (1 by default) for everything in the run.

- decode: B requests of a 16-token prompt, 128 sampled tokens each (ignore_eos), wall time
  from ``add`` to the last result, prefill included; median of ``repeats`` runs. Beside it,
  with transformers installed, HF ``generate`` on the same weights, prompts and sampling
  (``hf_generate.py``), its runs interleaved with the engine's; ``speedup_over_hf`` divides
  the two medians of this run. Without transformers both HF fields are null. One short
  untimed run of each warms up first.
- verify: one step (forward + token choice) of B rows with a chain draft of g tokens at a
  128-token context, median of repeats (the engine's own ``StepProfile``).
- spec_speedup: greedy, the same requests without drafts and with perfect drafts (the true
  continuation) of each length in a small grid; the best length per batch is reported.
"""

from __future__ import annotations

import statistics
import time
from typing import TypedDict

import torch
from rich.console import Console

from actors.generator import ChunkRequest, Draft, SamplingParams
from actors.generator.builtin import EngineConfig, StepProfile, TorchEngine
from actors.model import LlamaModel, ModelConfig
from pipeline.bench import hf_generate
from pipeline.records.report import results_table, write_results

BENCH_MODEL = ModelConfig(
    vocab_size=256,
    hidden=256,
    num_layers=4,
    num_heads=4,
    num_kv_heads=4,
    intermediate=688,
    max_context=1024,
)
BATCHES = (1, 8, 32)
PROMPT_LEN = 16


class DecodeRow(TypedDict):
    batch: int
    tokens_per_s: float
    hf_generate_tokens_per_s: float | None  # None: transformers not installed
    speedup_over_hf: float | None  # tokens_per_s / hf_generate_tokens_per_s, this run


class SpecRow(TypedDict):
    batch: int
    draft_len: int
    speedup: float
    steps: int
    baseline_steps: int
    outputs_match: bool


def run(json_path: str | None = None, quick: bool = False, threads: int = 1) -> dict[str, object]:
    """Run the benchmark, print its tables, write JSON to ``json_path`` if given."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = LlamaModel.random(BENCH_MODEL, seed=0)
        new_tokens = 32 if quick else 128
        hf = hf_generate.hf_twin(model) if hf_generate.version() else None
        repeats = 1 if quick else 3
        decode = _decode_rows(model, hf, new_tokens, repeats)
        lens = (0, 2, 4, 8) if quick else tuple(range(9))
        profile = StepProfile.measure(model, BATCHES, lens, context=128, repeats=3 if quick else 7)
        grid = [_speedup(model, b, new_tokens, (2, 4) if quick else (1, 2, 4, 8)) for b in BATCHES]
    finally:
        torch.set_num_threads(previous)
    best = [max(rows, key=lambda r: r["speedup"]) for rows in grid]
    _print(decode, profile, best, new_tokens, threads)
    result: dict[str, object] = {
        "model": {"params": sum(p.numel() for p in model.parameters()), **BENCH_MODEL.to_dict()},
        "threads": threads,
        "new_tokens": new_tokens,
        "prompt_len": PROMPT_LEN,
        "decode_repeats": repeats,
        "transformers_version": hf_generate.version(),
        "decode": decode,
        "verify": profile.as_rows(),
        "spec_speedup": best,
        "spec_grid": [row for rows in grid for row in rows],
    }
    if json_path:
        write_results(json_path, result)
    return result


def _engine(model: LlamaModel, batch: int) -> TorchEngine:
    cfg = EngineConfig(max_batch=batch, kv_budget_tokens=65536, profile=False, max_draft_tokens=8)
    return TorchEngine(model, cfg)


def _prompts(batch: int) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(batch)
    return [
        tuple(torch.randint(0, 256, (PROMPT_LEN,), generator=gen).tolist()) for _ in range(batch)
    ]


def _decode_rows(
    model: LlamaModel, hf: object | None, new_tokens: int, repeats: int
) -> list[DecodeRow]:
    """Decode tokens/s per batch, engine and HF runs interleaved; medians of ``repeats``."""
    _decode(model, 1, 8)  # warm-up, untimed
    if hf is not None:
        hf_generate.generate_tokens_per_s(hf, _prompts(1), 8)
    rows: list[DecodeRow] = []
    for batch in BATCHES:
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(_decode(model, batch, new_tokens))
            if hf is not None:
                theirs.append(hf_generate.generate_tokens_per_s(hf, _prompts(batch), new_tokens))
        tok_s = statistics.median(ours)
        hf_tok_s = statistics.median(theirs) if theirs else None
        rows.append(
            {
                "batch": batch,
                "tokens_per_s": tok_s,
                "hf_generate_tokens_per_s": hf_tok_s,
                "speedup_over_hf": tok_s / hf_tok_s if hf_tok_s else None,
            }
        )
    return rows


def _decode(model: LlamaModel, batch: int, new_tokens: int) -> float:
    """Tokens per second of one engine run of ``batch`` sampled requests."""
    engine = _engine(model, batch)
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    start = time.perf_counter()
    for i, prompt in enumerate(_prompts(batch)):
        engine.add(ChunkRequest(f"r{i}", prompt, new_tokens, params=params))
    generated = 0
    while engine.has_work():
        generated += sum(len(d.token_ids) for d in engine.step().deltas)
    return generated / (time.perf_counter() - start)


def _greedy_run(
    model: LlamaModel,
    batch: int,
    new_tokens: int,
    draft_len: int,
    truth: dict[str, list[int]] | None,
) -> tuple[float, dict[str, list[int]], int]:
    """Seconds, outputs and steps of a greedy run, with perfect drafts from ``truth``."""
    engine = _engine(model, batch)
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(batch)}
    start = time.perf_counter()
    for i, prompt in enumerate(_prompts(batch)):
        engine.add(ChunkRequest(f"r{i}", prompt, new_tokens, params=params))
    steps = 0
    while engine.has_work():
        drafts = {}
        if truth is not None and draft_len:
            for rid in engine.decoding_request_ids():
                done = len(out[rid])
                drafts[rid] = Draft.chain(truth[rid][done : done + draft_len])
        for delta in engine.step(drafts).deltas:
            out[delta.request_id].extend(delta.token_ids)
        steps += 1
    return time.perf_counter() - start, out, steps


def _speedup(
    model: LlamaModel, batch: int, new_tokens: int, lens: tuple[int, ...]
) -> list[SpecRow]:
    base_s, truth, base_steps = _greedy_run(model, batch, new_tokens, 0, None)
    rows: list[SpecRow] = []
    for g in lens:
        spec_s, out, steps = _greedy_run(model, batch, new_tokens, g, truth)
        rows.append(
            {
                "batch": batch,
                "draft_len": g,
                "speedup": base_s / spec_s,
                "steps": steps,
                "baseline_steps": base_steps,
                "outputs_match": out == truth,
            }
        )
    return rows


def _print(
    decode: list[DecodeRow],
    profile: StepProfile,
    best: list[SpecRow],
    new_tokens: int,
    threads: int,
) -> None:
    console = Console()
    if decode[0]["hf_generate_tokens_per_s"] is None:
        console.print("transformers is not installed: engine alone, no ratio to HF generate")
    decode_rows = []
    for row in decode:
        hf, ratio = row["hf_generate_tokens_per_s"], row["speedup_over_hf"]
        decode_rows.append(
            (
                str(row["batch"]),
                f"{row['tokens_per_s']:.0f}",
                f"{hf:.0f}" if hf else "-",
                f"{ratio:.2f}x" if ratio else "-",
            )
        )
    console.print(
        results_table(
            f"decode ({new_tokens} new tokens, {threads} thread, this run)",
            ("batch", "engine tok/s", "HF generate tok/s", "engine / HF"),
            decode_rows,
        )
    )
    verify_rows = [
        (
            str(int(b)),
            *(f"{1e3 * profile.seconds(int(b), int(g)):.2f}" for g in profile.draft_lens),
        )
        for b in profile.batches
    ]
    console.print(
        results_table(
            "verify step (ms) by batch and draft length g, context 128",
            ("batch", *(f"g={int(g)}" for g in profile.draft_lens)),
            verify_rows,
        )
    )
    best_rows = [
        (
            str(r["batch"]),
            str(r["draft_len"]),
            f"{r['speedup']:.2f}x",
            str(r["steps"]),
            str(r["baseline_steps"]),
            str(r["outputs_match"]),
        )
        for r in best
    ]
    console.print(
        results_table(
            "perfect drafts vs none (greedy), best draft length per batch",
            ("batch", "draft len", "speed-up", "steps", "baseline steps", "same output"),
            best_rows,
        )
    )
