"""`seer bench engine`: the built-in TorchEngine's decode speed beside Hugging Face
``generate`` measured in the same run, verify-step cost, and the speed-up from perfect drafts.

Model (``shape``): ``small``, a random 3.3M-parameter Llama (hidden 256, 4 layers, 4 heads,
vocab 256), or ``qwen2.5-0.5b``, a random model of Qwen2.5-0.5B's shape (hidden 896, 24
layers, 14 heads over 2 KV heads, intermediate 4864, vocab 151936, tied embeddings, q/k/v
biases, rope theta 1e6: 494M parameters); or ``model_dir``, a Hugging Face folder. Float32
on ``threads`` torch threads (1 by default) for everything in the run.

- decode: B requests of a random prompt (small: 16 tokens, 128 new; the others: 32 tokens,
  48 new), greedy, ignore_eos, wall time from ``add`` to the last result, prefill
  included; median of ``repeats`` runs. One engine serves every run (its packed weights
  are built once, as a server's are). Beside it, with transformers installed, HF
  ``generate`` on the same weights and prompts (``hf_generate.py``), its runs interleaved
  with the engine's; ``speedup_over_hf`` divides the two medians of this run, and
  ``same_as_hf`` counts the rows whose greedy tokens equal HF's. Without transformers the
  HF fields are null. One short untimed run of each warms up first.
- verify (small shape only): one step (forward + token choice) of B rows with a chain
  draft of g tokens at a 128-token context, median of repeats (the engine's ``StepProfile``).
- spec_speedup (small shape only): greedy, the same requests without drafts and with perfect
  drafts (the true continuation) of each length in a small grid; the best length per batch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, TypedDict

import torch
from rich.console import Console

from actors.generator import ChunkRequest, Draft, SamplingParams
from actors.generator.builtin import EngineConfig, StepProfile, TorchEngine
from actors.model import LlamaModel, ModelConfig, load_hf_folder
from actors.model.packed import PackedWeights
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
QWEN25_05B = ModelConfig(
    vocab_size=151936,
    hidden=896,
    num_layers=24,
    num_heads=14,
    num_kv_heads=2,
    intermediate=4864,
    max_context=1024,
    rope_theta=1e6,
    norm_eps=1e-6,
    tie_embeddings=True,
    attention_bias=True,
)
SHAPES = {"small": BENCH_MODEL, "qwen2.5-0.5b": QWEN25_05B}
BATCHES = (1, 8, 32)
PROMPT_LEN = 16  # the small shape's; the others' is LARGE_PROMPT_LEN
LARGE_PROMPT_LEN = 32
NEW_TOKENS = {True: {False: 128, True: 32}, False: {False: 48, True: 8}}  # [small][quick]
MAX_SEQ_LEN = 256  # the engine's slots: the longest prompt + new tokens + draft, with room


class DecodeRow(TypedDict):
    batch: int
    tokens_per_s: float
    hf_generate_tokens_per_s: float | None  # None: transformers not installed
    speedup_over_hf: float | None  # tokens_per_s / hf_generate_tokens_per_s, this run
    same_as_hf: int | None  # rows whose greedy tokens equal HF generate's (last run)


class SpecRow(TypedDict):
    batch: int
    draft_len: int
    speedup: float
    steps: int
    baseline_steps: int
    outputs_match: bool


def run(
    json_path: str | None = None,
    quick: bool = False,
    threads: int = 1,
    shape: str = "small",
    model_dir: str | None = None,
    repeats: int | None = None,
) -> dict[str, object]:
    """Run the benchmark, print its tables, write JSON to ``json_path`` if given."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}: one of {sorted(SHAPES)}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        small = model_dir is None and shape == "small"
        model, hf = _models(shape, model_dir)
        prompt_len = PROMPT_LEN if small else LARGE_PROMPT_LEN
        new_tokens = NEW_TOKENS[small][quick]
        repeats = repeats or (1 if quick else 3)
        decode = _decode_rows(model, hf, prompt_len, new_tokens, repeats)
        grid: list[list[SpecRow]] = []
        profile = None
        if small:
            lens = (0, 2, 4, 8) if quick else tuple(range(9))
            packed = PackedWeights(model)
            reps = 3 if quick else 7
            profile = StepProfile.measure(model, BATCHES, lens, 128, reps, packed)
            spec = (2, 4) if quick else (1, 2, 4, 8)
            grid = [_speedup(model, b, new_tokens, spec) for b in BATCHES]
    finally:
        torch.set_num_threads(previous)
    best = [max(rows, key=lambda r: r["speedup"]) for rows in grid]
    label = model_dir or shape
    _print(label, decode, profile, best, prompt_len, new_tokens, threads)
    result: dict[str, object] = {
        "shape": label,
        "model": {"params": sum(p.numel() for p in model.parameters()), **model.config.to_dict()},
        "threads": threads,
        "new_tokens": new_tokens,
        "prompt_len": prompt_len,
        "decode_repeats": repeats,
        "transformers_version": hf_generate.version(),
        "decode": decode,
        "verify": profile.as_rows() if profile is not None else [],
        "spec_speedup": best,
        "spec_grid": [row for rows in grid for row in rows],
    }
    if json_path:
        write_results(json_path, result)
    return result


def _models(shape: str, model_dir: str | None) -> tuple[LlamaModel, Any]:
    """Our model and its HF twin (None without transformers), float32."""
    if model_dir is not None:
        model = load_hf_folder(model_dir, max_context=MAX_SEQ_LEN).float()
        hf = hf_generate.from_folder(model_dir) if hf_generate.version() else None
        return model, hf
    model = LlamaModel.random(SHAPES[shape], seed=0)
    return model, hf_generate.hf_twin(model) if hf_generate.version() else None


def _engine(model: LlamaModel, batch: int) -> TorchEngine:
    cfg = EngineConfig(
        max_batch=batch,
        kv_budget_tokens=65536,
        max_seq_len=min(MAX_SEQ_LEN, model.config.max_context),
        profile=False,
        max_draft_tokens=8,
    )
    return TorchEngine(model, cfg)


def _prompts(batch: int, vocab: int = 256, length: int = PROMPT_LEN) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(batch)
    return [tuple(torch.randint(0, vocab, (length,), generator=gen).tolist()) for _ in range(batch)]


def _decode_rows(
    model: LlamaModel, hf: Any, prompt_len: int, new_tokens: int, repeats: int
) -> list[DecodeRow]:
    """Decode tokens/s per batch, engine and HF runs interleaved; medians of ``repeats``."""
    vocab = model.config.vocab_size
    engine = _engine(model, max(BATCHES))
    _decode(engine, _prompts(2, vocab, prompt_len), 4)  # warm-up, untimed
    if hf is not None:
        hf_generate.generate_greedy(hf, _prompts(2, vocab, prompt_len), 4)
    rows: list[DecodeRow] = []
    for batch in BATCHES:
        prompts = _prompts(batch, vocab, prompt_len)
        ours, theirs = [], []
        same = None
        for _ in range(repeats):
            tok_s, out = _decode(engine, prompts, new_tokens)
            ours.append(tok_s)
            if hf is not None:
                hf_tok_s, hf_out = hf_generate.generate_greedy(hf, prompts, new_tokens)
                theirs.append(hf_tok_s)
                same = sum(a == b for a, b in zip(out, hf_out, strict=True))
        tok_s = statistics.median(ours)
        hf_med = statistics.median(theirs) if theirs else None
        rows.append(
            {
                "batch": batch,
                "tokens_per_s": tok_s,
                "hf_generate_tokens_per_s": hf_med,
                "speedup_over_hf": tok_s / hf_med if hf_med else None,
                "same_as_hf": same,
            }
        )
    return rows


def _decode(
    engine: TorchEngine, prompts: list[tuple[int, ...]], new_tokens: int
) -> tuple[float, list[list[int]]]:
    """Tokens per second of one engine run of greedy requests, and each row's tokens."""
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(len(prompts))}
    start = time.perf_counter()
    for i, prompt in enumerate(prompts):
        engine.add(ChunkRequest(f"r{i}", prompt, new_tokens, params=params))
    while engine.has_work():
        for delta in engine.step().deltas:
            out[delta.request_id].extend(delta.token_ids)
    seconds = time.perf_counter() - start
    return sum(len(t) for t in out.values()) / seconds, list(out.values())


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
    label: str,
    decode: list[DecodeRow],
    profile: StepProfile | None,
    best: list[SpecRow],
    prompt_len: int,
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
                "-" if row["same_as_hf"] is None else f"{row['same_as_hf']}/{row['batch']}",
            )
        )
    console.print(
        results_table(
            f"{label}: decode, {prompt_len}-token prompts, {new_tokens} new tokens, greedy, "
            f"{threads} thread, this run",
            ("batch", "engine tok/s", "HF generate tok/s", "engine / HF", "same as HF"),
            decode_rows,
        )
    )
    if profile is None:
        return
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench engine`'s own flags (beside --json and --quick)."""
    parser.add_argument(
        "--shape",
        default="small",
        choices=("small", "qwen2.5-0.5b"),
        help="the random model's shape (small: 3.3M parameters; qwen2.5-0.5b: 494M)",
    )
    parser.add_argument("--model", help="a Hugging Face model folder (llama, qwen2) instead")
    parser.add_argument("--repeats", type=int, help="runs per variant (the median is reported)")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench engine` from its parsed flags."""
    run(args.json, quick=args.quick, shape=args.shape, model_dir=args.model, repeats=args.repeats)
