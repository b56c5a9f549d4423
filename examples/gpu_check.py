"""The built-in engine and the trainer on one CUDA device: a prepared check for a GPU machine.

A random Qwen2 model of Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads, 2 key/value
heads, intermediate 4864, vocabulary 151936, tied embeddings, rope_theta 1e6; 494M
parameters) is made with transformers' own classes and ``save_pretrained`` into a
temporary folder in ``--dtype`` (no tokenizer: prompts are random token ids). Its weights
are drawn so next-token distributions are peaked, as a trained model's are, rather than
near-uniform over 151936 ids: the (tied) embedding with std 3/sqrt(hidden) (logits of std
about 3), every other matrix and bias with std 0.6/sqrt(hidden) (0.02 at hidden 896, as
transformers' own initialisation), norms 1 +- 0.2 (``INIT_SCALES``; the mean greedy
log-probability is reported beside the agreement). Then, on ``--device``:

- decode: the built-in ``TorchEngine`` over ``build_model(ModelOptions(path=folder,
  dtype, device))`` beside ``transformers``' ``generate`` on the same folder, the same
  prompts (``--prompt-len`` random ids), greedy, ``--new-tokens`` each (EOS ignored), at
  each batch of ``--batches``; engine and HF runs interleaved, the median of ``--repeats``
  each, after one untimed warm-up of each. Wall time from the first request to the last
  token, prefill included, with ``torch.cuda.synchronize()`` before every clock read.
  ``same_tokens``: the share of rows whose greedy tokens equal generate's (bf16 may flip
  near-ties; float32 should give 1.0).
- train: ``--check-batch`` greedy completions from the engine (GRPO groups of 4, rewards
  0/1 alternating so no group is skipped) and one ``GRPOTrainer`` step on the device
  (first step: includes AdamW's state allocation and the first backward) and a second
  one, each timed with synchronisation.
- agreement: on those completions, before the update, |engine - trainer| of each
  generated token's log-probability (the engine's reported logprobs; the trainer's
  teacher-forced ``token_logprobs`` on the same weights), mean and max; the same against
  transformers' own forward pass.

It prints tables and writes JSON (``--out``). On CPU (``--device cpu --dtype float32
--shape tiny``) it runs in seconds, which is how it is tested; it has not yet run on a CUDA
device (no device was lent to the task that wrote it).

    python examples/gpu_check.py                      # cuda, bfloat16, qwen2.5-0.5b
    python examples/gpu_check.py --device cpu --dtype float32 --shape tiny
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelOptions, build_model, check_device
from actors.options import ConfigError
from actors.trainer import GRPOTrainer, TrainSample, make_batch, token_logprobs
from pipeline.records.report import results_table, write_results

SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
    },
    "tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 512,
        "max_position_embeddings": 512,
    },
}
# weights: std scale/sqrt(hidden) for the (tied) embedding and for every other matrix and
# bias, chosen so greedy tokens have log-probabilities of a few nats, neither near-uniform
# over the vocabulary nor near-certain (which would make the agreement trivially tight)
INIT_SCALES = {"qwen2.5-0.5b": (3.0, 0.6), "tiny": (1.5, 1.0)}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CheckError(RuntimeError):
    """The check cannot run here (no CUDA, no transformers); the message says why."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--dtype", default="bfloat16", choices=tuple(DTYPES))
    p.add_argument("--shape", default="qwen2.5-0.5b", choices=tuple(SHAPES))
    p.add_argument("--batches", default="1,8,64", help="comma-separated batch sizes")
    p.add_argument("--new-tokens", type=int, default=128, help="generated tokens per request")
    p.add_argument("--prompt-len", type=int, default=32, help="random prompt tokens")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per batch (median)")
    p.add_argument("--check-batch", type=int, default=8, help="completions for train/agreement")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: as is)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/gpu-check.json", help="JSON results")
    return p


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        batches = tuple(int(b) for b in text.split(",") if b.strip())
    except ValueError:
        raise CheckError(f"--batches must be comma-separated integers, got {text!r}") from None
    if not batches or min(batches) <= 0:
        raise CheckError(f"--batches must be positive integers, got {text!r}")
    return batches


def check_environment(device: str, dtype: str) -> torch.device:
    """The torch device, or a ``CheckError`` saying what is missing."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        raise CheckError("transformers is not installed: pip install 'seer-rl[hf]'")
    try:
        target = check_device(device)
    except ConfigError as exc:
        hint = " (run with --device cpu --dtype float32 --shape tiny to try it on CPU)"
        raise CheckError(f"{exc}{hint}") from None
    if target.type == "cuda" and dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        raise CheckError(f"{device} does not support bfloat16: use --dtype float16 or float32")
    return target


def sync(device: torch.device) -> None:
    """Wait for the device's queued work, so a clock read after it is honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- the model folder ------------------------------------------------------------------


def make_folder(path: Path, shape: str, dtype: str, seed: int) -> dict[str, Any]:
    """A random Qwen2 folder of ``shape`` saved in ``dtype``; its config and size."""
    import transformers

    logging.getLogger("transformers").setLevel(logging.ERROR)
    transformers.utils.logging.disable_progress_bar()
    config = transformers.Qwen2Config(
        **SHAPES[shape],
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    hidden = config.hidden_size
    embed_scale, layer_scale = INIT_SCALES[shape]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn(param.shape, generator=gen))
            else:
                std = (embed_scale if "embed" in name else layer_scale) / hidden**0.5
                param.copy_(std * torch.randn(param.shape, generator=gen))
    params = sum(p.numel() for p in model.parameters())
    model.to(DTYPES[dtype]).save_pretrained(str(path), safe_serialization=True)
    return {"shape": shape, "params": params, **SHAPES[shape]}


def hf_model(path: Path, dtype: str, device: torch.device) -> Any:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=DTYPES[dtype])
    return model.to(device).eval()


def prompts(batch: int, length: int, vocab: int, seed: int) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed * 1000 + batch)
    return [tuple(torch.randint(1, vocab, (length,), generator=gen).tolist()) for _ in range(batch)]


# ---- decode ----------------------------------------------------------------------------


def engine_run(
    model: LlamaModel, batch: list[tuple[int, ...]], new_tokens: int, device: torch.device
) -> tuple[float, list[list[int]], list[list[float]]]:
    """Seconds, greedy tokens and their logprobs of one engine run over ``batch``."""
    max_seq = len(batch[0]) + new_tokens
    cfg = EngineConfig(
        max_batch=len(batch),
        kv_budget_tokens=len(batch) * max_seq,
        max_seq_len=max_seq,
        max_prefill_tokens=max(512, len(batch[0])),
        profile=False,
    )
    engine = TorchEngine(model, cfg)  # its KV cache takes the weights' dtype and device
    params = SamplingParams(temperature=0.0, ignore_eos=True)
    tokens: dict[str, list[int]] = {f"r{i}": [] for i in range(len(batch))}
    logprobs: dict[str, list[float]] = {f"r{i}": [] for i in range(len(batch))}
    sync(device)
    start = time.perf_counter()
    for i, prompt in enumerate(batch):
        engine.add(ChunkRequest(f"r{i}", prompt, new_tokens, params=params))
    while engine.has_work():
        for delta in engine.step().deltas:
            tokens[delta.request_id].extend(delta.token_ids)
            logprobs[delta.request_id].extend(delta.logprobs)
    sync(device)
    seconds = time.perf_counter() - start
    return seconds, list(tokens.values()), list(logprobs.values())


def hf_run(
    hf: Any, batch: list[tuple[int, ...]], new_tokens: int, device: torch.device
) -> tuple[float, list[list[int]]]:
    """Seconds and greedy tokens of one ``generate`` call (equal lengths: no padding)."""
    ids = torch.tensor(batch, dtype=torch.long, device=device)  # (B, P)
    with torch.inference_mode():
        sync(device)
        start = time.perf_counter()
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            pad_token_id=0,
        )
        sync(device)
        seconds = time.perf_counter() - start
    generated = out[:, ids.shape[1] :].tolist()
    if any(len(row) != new_tokens for row in generated):
        raise RuntimeError(f"generate made {out.shape[1] - ids.shape[1]} tokens, not {new_tokens}")
    return seconds, generated


def decode_rows(
    model: LlamaModel, hf: Any, args: argparse.Namespace, device: torch.device, vocab: int
) -> list[dict[str, Any]]:
    warm = prompts(1, args.prompt_len, vocab, args.seed + 1)
    engine_run(model, warm, 4, device)  # untimed warm-up of each side
    hf_run(hf, warm, 4, device)
    rows = []
    for batch_size in parse_batches(args.batches):
        batch = prompts(batch_size, args.prompt_len, vocab, args.seed)
        ours: list[float] = []
        theirs: list[float] = []
        same = prefix = 0.0
        for repeat in range(args.repeats):
            seconds, tokens, _ = engine_run(model, batch, args.new_tokens, device)
            ours.append(batch_size * args.new_tokens / seconds)
            hf_seconds, hf_tokens = hf_run(hf, batch, args.new_tokens, device)
            theirs.append(batch_size * args.new_tokens / hf_seconds)
            if repeat == 0:
                same, prefix = token_match(tokens, hf_tokens)
        tok_s, hf_tok_s = statistics.median(ours), statistics.median(theirs)
        rows.append(
            {
                "batch": batch_size,
                "tokens_per_s": tok_s,
                "hf_generate_tokens_per_s": hf_tok_s,
                "speedup_over_hf": tok_s / hf_tok_s,
                "same_tokens": same,
                "same_prefix": prefix,
            }
        )
    return rows


def token_match(ours: list[list[int]], theirs: list[list[int]]) -> tuple[float, float]:
    """The share of rows with equal tokens, and the mean share of each row's tokens before
    its first difference."""
    same = sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(ours)
    prefixes = []
    for a, b in zip(ours, theirs, strict=True):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))
        prefixes.append(n / len(a))
    return same, sum(prefixes) / len(prefixes)


# ---- one trainer step and the agreement ------------------------------------------------


def samples_of(
    batch: list[tuple[int, ...]], tokens: list[list[int]], logprobs: list[list[float]], version: int
) -> list[TrainSample]:
    return [
        TrainSample(
            prompt_ids=prompt,
            completion_ids=tuple(completion),
            old_logprobs=tuple(lps),
            reward=float(i % 2),
            group_id=f"g{i // 4}",  # groups of 4 with rewards 0, 1, 0, 1
            weight_versions=(version,),
            request_id=f"r{i}",
        )
        for i, (prompt, completion, lps) in enumerate(zip(batch, tokens, logprobs, strict=True))
    ]


@torch.no_grad()
def gaps(
    samples: list[TrainSample], engine_logprobs: Any, forward: Any, device: torch.device
) -> dict[str, float]:
    """Mean and max |engine - forward| log-probability over every generated token."""
    batch = make_batch(samples, pad_id=0).to(device)
    logits = forward(batch.input_ids)  # (B, T, V)
    theirs = token_logprobs(logits.float(), batch.targets)  # (B, T)
    mask = batch.mask.bool()
    ours = engine_logprobs.to(device)[mask]
    diff = (theirs[mask] - ours).abs()
    return {
        "mean": float(diff.mean()),
        "max": float(diff.max()),
        "tokens": int(mask.sum()),
        "engine_logprob_mean": float(ours.mean()),  # near 0: near-certain tokens, an easy test
    }


def train_and_agree(
    args: argparse.Namespace, folder: Path, device: torch.device, engine_model: LlamaModel, hf: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    vocab = engine_model.config.vocab_size
    batch = prompts(args.check_batch, args.prompt_len, vocab, args.seed + 2)
    _, tokens, logprobs = engine_run(engine_model, batch, args.new_tokens, device)
    samples = samples_of(batch, tokens, logprobs, version=0)
    old = make_batch(samples, pad_id=0).old_logprobs  # (B, T) the engine's, in place
    options = ModelOptions(
        path=str(folder),
        dtype=args.dtype,
        device=str(device),
        max_context=args.prompt_len + args.new_tokens,
    )
    trainer = GRPOTrainer(build_model(options), lr=1e-5, micro_batch_size=args.check_batch)
    trainer.model.train()
    agreement = {
        "trainer": gaps(samples, old, trainer.model, device),
        "transformers": gaps(samples, old, lambda ids: hf(ids).logits, device),
    }
    sync(device)
    start = time.perf_counter()
    stats = trainer.step(samples)
    sync(device)
    first = time.perf_counter() - start
    again = samples_of(batch, tokens, logprobs, version=1)  # stale logprobs: timing only
    sync(device)
    start = time.perf_counter()
    trainer.step(again)
    sync(device)
    second = time.perf_counter() - start
    train = {
        "samples": len(samples),
        "tokens": int(stats["num_tokens"]),
        "first_step_s": first,
        "second_step_s": second,
        "loss": stats["loss"],
        "grad_norm": stats["grad_norm"],
        "step_logprob_gap_max": stats["logprob_gap_max"],  # the trainer's own, same numbers
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
    }
    return train, agreement


# ---- the report --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    import transformers

    device = check_environment(args.device, args.dtype)
    parse_batches(args.batches)
    if args.check_batch < 2 or min(args.new_tokens, args.prompt_len, args.repeats) <= 0:
        raise CheckError("--check-batch must be >= 2; --new-tokens, --prompt-len, --repeats > 0")
    with tempfile.TemporaryDirectory(prefix="seer-gpu-check-") as tmp:
        folder = Path(tmp)
        model_info = make_folder(folder, args.shape, args.dtype, args.seed)
        options = ModelOptions(
            path=str(folder),
            dtype=args.dtype,
            device=str(device),
            max_context=args.prompt_len + args.new_tokens,
        )
        engine_model = build_model(options)
        hf = hf_model(folder, args.dtype, device)
        decode = decode_rows(engine_model, hf, args, device, engine_model.config.vocab_size)
        train, agreement = train_and_agree(args, folder, device, engine_model, hf)
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": args.dtype,
        "model": model_info,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "threads": torch.get_num_threads(),
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "decode": decode,
        "train": train,
        "agreement": agreement,
    }


def print_report(result: dict[str, Any]) -> None:
    from rich.console import Console

    console = Console()
    where = f"{result['device_name']} ({result['device']}), {result['dtype']}"
    decode = [
        (
            str(r["batch"]),
            f"{r['tokens_per_s']:.0f}",
            f"{r['hf_generate_tokens_per_s']:.0f}",
            f"{r['speedup_over_hf']:.2f}x",
            f"{r['same_tokens']:.2f}",
            f"{r['same_prefix']:.2f}",
        )
        for r in result["decode"]
    ]
    console.print(
        results_table(
            f"greedy decode, {result['model']['shape']} ({result['model']['params'] / 1e6:.1f}M), "
            f"{where}, {result['prompt_len']}+{result['new_tokens']} tokens, "
            f"median of {result['repeats']}",
            (
                "batch",
                "engine tok/s",
                "HF generate tok/s",
                "engine / HF",
                "same rows",
                "same prefix",
            ),
            decode,
        )
    )
    train, agree = result["train"], result["agreement"]
    console.print(
        results_table(
            f"one GRPO step ({train['samples']} samples, {train['tokens']} tokens) and "
            "log-probability agreement over the generated tokens",
            ("quantity", "value"),
            [
                ("first step (s)", f"{train['first_step_s']:.3f}"),
                ("second step (s)", f"{train['second_step_s']:.3f}"),
                ("|engine - trainer| mean", f"{agree['trainer']['mean']:.2e}"),
                ("|engine - trainer| max", f"{agree['trainer']['max']:.2e}"),
                ("|engine - transformers| mean", f"{agree['transformers']['mean']:.2e}"),
                ("|engine - transformers| max", f"{agree['transformers']['max']:.2e}"),
            ],
            justify="left",
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        result = run(args)
    except CheckError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(previous)
    print_report(result)
    print(f"wrote {write_results(args.out, result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
