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
- spec_adaptive (small shape only): the same perfect drafts, their depth chosen step by step
  by the generator's adaptive budget (``MarginalBenefitPolicy``, padded, priced by the
  verify profile above and by the step times it measures, as live); after one untimed
  run of the same requests (the policy learns acceptance and cost online, as a
  generator does across iterations), its speed-up over no drafts beside the best fixed
  length's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, TypedDict

import torch
from rich.console import Console

from actors.drafts.options import SpecConfig
from actors.drafts.policy import Candidate, MarginalBenefitPolicy
from actors.generator import ChunkRequest, Draft, SamplingParams
from actors.generator.builtin import EngineConfig, StepProfile, TorchEngine
from actors.generator.speculator import node_outcomes
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
ADAPTIVE_BATCHES = {False: BATCHES, True: (8,)}  # [quick]
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


class AdaptiveRow(TypedDict):
    batch: int
    speedup: float  # over no drafts, this run
    best_fixed_speedup: float  # the best fixed draft length's, this run
    mean_depth: float  # draft nodes per drafted row
    drafted_steps: int
    steps: int
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
        adaptive: list[AdaptiveRow] = []
        profile = None
        if small:
            lens = (0, 2, 4, 8) if quick else tuple(range(9))
            packed = PackedWeights(model)
            reps = 3 if quick else 7
            profile = StepProfile.measure(model, BATCHES, lens, 128, reps, packed)
            spec = (2, 4) if quick else (1, 2, 4, 8)
            runs = [_speedup(model, b, new_tokens, spec) for b in BATCHES]
            grid = [rows for rows, _, _ in runs]
            adaptive = [
                _adaptive(model, b, new_tokens, profile, rows, base_s, truth)
                for b, (rows, base_s, truth) in zip(BATCHES, runs, strict=True)
                if b in ADAPTIVE_BATCHES[quick]
            ]
    finally:
        torch.set_num_threads(previous)
    best = [max(rows, key=lambda r: r["speedup"]) for rows in grid]
    label = model_dir or shape
    _print(label, decode, profile, best, prompt_len, new_tokens, threads, adaptive)
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
        "spec_adaptive": adaptive,
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


def _adaptive_run(
    model: LlamaModel,
    batch: int,
    new_tokens: int,
    truth: dict[str, list[int]],
    policy: MarginalBenefitPolicy,
) -> tuple[float, dict[str, list[int]], int, int, int, int]:
    """Seconds, outputs, steps, drafted steps, drafted rows and draft nodes of a greedy run
    with perfect
    drafts of the depth ``policy`` grants each step; the policy observes every verified
    draft and every decode step's measured seconds (drafting work included), as the
    generator's ``Speculator`` does."""
    engine = _engine(model, batch)
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    out: dict[str, list[int]] = {f"r{i}": [] for i in range(batch)}
    g_max = policy.config.g_max
    start = time.perf_counter()
    for i, prompt in enumerate(_prompts(batch)):
        engine.add(ChunkRequest(f"r{i}", prompt, new_tokens, params=params))
    steps = drafted = rows = nodes = 0
    while engine.has_work():
        began = time.perf_counter()
        decoding = engine.decoding_request_ids()
        drafts: dict[str, Draft] = {}
        if decoding and policy.can_pay(len(decoding)):
            ahead = {rid: truth[rid][len(out[rid]) : len(out[rid]) + g_max] for rid in decoding}
            cands = [Candidate(rid, False, [1.0] * len(ahead[rid])) for rid in decoding]
            grant = policy.allocate(len(decoding), cands)
            drafts = {rid: Draft.chain(ahead[rid][:n]) for rid, n in grant.items()}
        result = engine.step(drafts)
        made = 0
        for delta in result.deltas:
            out[delta.request_id].extend(delta.token_ids)
            made += len(delta.token_ids)
            draft = drafts.get(delta.request_id)
            if draft is not None:
                ok = delta.num_accepted_tokens
                depths, node_ok = node_outcomes(draft, delta.token_ids[:ok])
                policy.observe(max(depths), ok, [1.0] * len(draft), node_ok)
                rows += 1
                nodes += len(draft)
        measured = not result.num_prefill_tokens and len(result.deltas) == len(decoding)
        seconds = time.perf_counter() - began if measured else 0.0
        policy.observe_step(len(decoding), made, seconds)
        steps += 1
        drafted += bool(drafts)
    return time.perf_counter() - start, out, steps, drafted, rows, nodes


def _adaptive(
    model: LlamaModel,
    batch: int,
    new_tokens: int,
    profile: StepProfile,
    fixed: list[SpecRow],
    base_s: float,
    truth: dict[str, list[int]],
) -> AdaptiveRow:
    """The adaptive budget on perfect drafts against no drafts (``base_s``, its outputs
    ``truth``), after one untimed run; beside the best of the ``fixed`` lengths."""
    policy = MarginalBenefitPolicy(SpecConfig(), profile.seconds, padded=True)
    _adaptive_run(model, batch, new_tokens, truth, policy)  # learns, untimed
    spec_s, out, steps, drafted, rows, nodes = _adaptive_run(
        model, batch, new_tokens, truth, policy
    )
    return {
        "batch": batch,
        "speedup": base_s / spec_s,
        "best_fixed_speedup": max(r["speedup"] for r in fixed),
        "mean_depth": nodes / rows if rows else 0.0,
        "drafted_steps": drafted,
        "steps": steps,
        "outputs_match": out == truth,
    }


def _speedup(
    model: LlamaModel, batch: int, new_tokens: int, lens: tuple[int, ...]
) -> tuple[list[SpecRow], float, dict[str, list[int]]]:
    """The fixed draft lengths' rows; the run without drafts: its seconds and outputs."""
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
    return rows, base_s, truth


def _print(
    label: str,
    decode: list[DecodeRow],
    profile: StepProfile | None,
    best: list[SpecRow],
    prompt_len: int,
    new_tokens: int,
    threads: int,
    adaptive: list[AdaptiveRow],
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
    adaptive_rows = [
        (
            str(r["batch"]),
            f"{r['speedup']:.2f}x",
            f"{r['best_fixed_speedup']:.2f}x",
            f"{r['mean_depth']:.1f}",
            str(r["steps"]),
            str(r["outputs_match"]),
        )
        for r in adaptive
    ]
    console.print(
        results_table(
            "perfect drafts, depth by the adaptive budget (after one untimed run)",
            ("batch", "speed-up", "best fixed", "mean depth", "steps", "same output"),
            adaptive_rows,
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
