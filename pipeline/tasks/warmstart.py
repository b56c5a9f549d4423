"""Supervised warm start, cached on disk, and a sampling evaluation with the built-in engine.

``warm_start(task, model_config, cache_dir=...)`` trains a fresh ``LlamaModel`` for ``steps``
optimiser steps of ``batch_size`` freshly sampled ``task.sft_example`` completions (of the
task's ``sft_prompts`` when it has them, else of ``sample_prompts``) and saves it
with ``save_model`` under ``cache_dir/<task>-<key>.safetensors``, where ``key`` hashes exactly
what determines the weights: the recipe version, the task's ``fingerprint`` (its name when it
has none), the model config, seed, steps, batch size and learning rate. When that file exists
it is returned at once: no training, no progress callbacks. The file is written to a
temporary name and renamed, so a crash never leaves a half-written cache entry.

A multi-turn task gives whole trajectories with their loss mask (``sft_episode(prompt, rng)
-> (tokens, mask)``, mask 1 on the model's action tokens): its observation tokens are masked
out of the loss like the prompt, so the model learns to act, never to predict its
environment.

Recipe: cross-entropy on completion tokens only (prompt and padding masked), batches of
similar lengths (a pool of ``8 * batch_size`` examples sorted by length, then split) to cut
padding, AdamW, linear warm-up then cosine decay to 10% over the ``steps``, gradient clipping
at 1.0. Data, initialisation and schedule are functions of (seed, step) and torch runs on a
fixed number of threads, so the weights do not depend on how fast or busy the machine is.

``evaluate(task, model, ...)`` samples ``samples`` completions for each of ``num_prompts``
prompts with ``TorchEngine`` and reports the mean reward and length statistics.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import structlog
import torch
import torch.nn.functional as F

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.model import LlamaModel, ModelConfig, save_model
from pipeline.tasks.base import Task

log = structlog.get_logger()

# The default budget. Countdown's warm-start prompts (`Countdown.sft_prompts`: N uniform, not
# log-uniform) are about twice as long as its RL prompts, so a step of batch 64 for `seer
# run`'s model (hidden 128, 4 layers, 2 threads) holds about 3,850 target tokens: 400 steps
# took 183 s on a 2-core machine with little else running (300 steps reach 0.62 held-out
# success at temperature 1 where 400 reach 0.67; 400 steps of batch 32, 0.59). The same
# steps give the same weights on any machine, only later on a slower or busier one.
DEFAULT_STEPS = 400
IGNORE = -100
RECIPE_VERSION = 3  # bump when the training recipe changes: old cache entries stop matching

Progress = Callable[[dict[str, Any]], None]


def warm_start_path(
    task: Task,
    model_config: ModelConfig,
    *,
    cache_dir: str | Path,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 3e-3,
) -> Path:
    """Where ``warm_start`` with these arguments caches its model."""
    key = {
        "recipe": RECIPE_VERSION,
        "task": getattr(task, "fingerprint", task.name),
        "model": model_config.to_dict(),
        "seed": seed,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{task.name}-{digest}.safetensors"


def warm_start(
    task: Task,
    model_config: ModelConfig,
    *,
    cache_dir: str | Path,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 3e-3,
    progress: Progress | None = None,
    num_threads: int = 2,
) -> Path:
    """Train (or find in the cache) a warm-started model; its safetensors path. ``progress``
    gets ``step`` (1..``steps``), ``steps``, ``loss``, ``lr`` and ``tokens`` after every step."""
    if steps < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"need steps, batch_size >= 1 and lr > 0; got {steps}, {batch_size}, {lr}")
    if model_config.vocab_size < task.vocab_size:
        raise ValueError(
            f"model vocab_size {model_config.vocab_size} < task vocab_size {task.vocab_size}"
        )
    path = warm_start_path(
        task,
        model_config,
        cache_dir=cache_dir,
        steps=steps,
        seed=seed,
        batch_size=batch_size,
        lr=lr,
    )
    if path.exists():
        log.info("warm_start_cache_hit", path=str(path))
        return path
    previous = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    start = time.perf_counter()
    try:
        model, stats = _train(task, model_config, steps, seed, batch_size, lr, progress)
    finally:
        torch.set_num_threads(previous)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_model(model, tmp, metadata={"task": task.name, **{k: str(v) for k, v in stats.items()}})
    os.replace(tmp, path)
    log.info("warm_start_saved", path=str(path), elapsed_s=time.perf_counter() - start, **stats)
    return path


def _train(
    task: Task,
    cfg: ModelConfig,
    steps: int,
    seed: int,
    batch_size: int,
    lr: float,
    progress: Progress | None,
) -> tuple[LlamaModel, dict[str, float]]:
    torch.manual_seed(seed)
    model = LlamaModel.random(cfg, seed=seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    batches = _length_bucketed(task, batch_size, cfg.max_context, np.random.default_rng(seed))
    stats: dict[str, float] = {"steps": steps, "loss": math.nan, "tokens": 0}
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * _lr_scale(step, steps)
        inputs, targets = next(batches)
        loss = sft_loss(model, inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        stats["tokens"] += int((targets != IGNORE).sum())
        stats["loss"] = loss.item()
        if progress is not None:
            progress({"step": step + 1, **stats, "lr": opt.param_groups[0]["lr"]})
    return model.eval(), stats


def _lr_scale(step: int, steps: int, warmup_steps: int = 30, floor: float = 0.1) -> float:
    """Linear warm-up over the first steps, then cosine from 1 to ``floor`` at the last step."""
    warm = min(1.0, (step + 1) / warmup_steps)
    frac = step / max(steps - 1, 1)
    cosine = floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))
    return warm * cosine


def sft_batch(
    task: Task,
    examples: list[tuple[tuple[int, ...], list[int]]],
    max_context: int,
    masks: list[list[int]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompt, completion) pairs -> inputs (B, T) and targets (B, T); targets are the next
    token on completion positions and ``IGNORE`` on prompt and padding (pad = EOS).
    ``masks`` (one per example, a 0/1 per completion token): a multi-turn trajectory's loss
    mask; a 0 token (an observation) is ``IGNORE`` too, so it gets no gradient."""
    seqs = [[*prompt, *completion][: max_context + 1] for prompt, completion in examples]
    width = max(len(s) for s in seqs) - 1
    inputs = torch.full((len(seqs), width), task.eos_token_id, dtype=torch.long)
    targets = torch.full((len(seqs), width), IGNORE, dtype=torch.long)
    for row, ((prompt, completion), seq) in enumerate(zip(examples, seqs, strict=True)):
        n = len(seq) - 1
        inputs[row, :n] = torch.tensor(seq[:-1])
        target = torch.tensor(seq[len(prompt) :])
        if masks is not None:
            if len(masks[row]) != len(completion):
                raise ValueError(
                    f"sft_batch: example {row} has {len(completion)} completion tokens but "
                    f"{len(masks[row])} loss-mask entries"
                )
            keep = torch.tensor(masks[row][: len(target)], dtype=torch.bool)
            target = target.masked_fill(~keep, IGNORE)
        targets[row, len(prompt) - 1 : n] = target
    return inputs, targets


def sft_loss(model: LlamaModel, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the unmasked target tokens."""
    logits = model(inputs)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def _length_bucketed(
    task: Task, batch_size: int, max_context: int, rng: np.random.Generator, pool: int = 8
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless padded batches; each pool of fresh examples is sorted by length and split, and
    its batches come in random order. Prompts come from the task's ``sft_prompts`` when it
    has one (see ``Task``)."""
    draw = getattr(task, "sft_prompts", task.sample_prompts)
    episode = getattr(task, "sft_episode", None)  # a multi-turn task: (tokens, loss mask)
    while True:
        prompts = draw(batch_size * pool, rng)
        rows: list[tuple[tuple[int, ...], list[int], list[int]]]  # prompt, tokens, mask
        if episode is None:
            rows = [(p.token_ids, task.sft_example(p, rng), []) for p in prompts]
        else:
            rows = [(p.token_ids, *episode(p, rng)) for p in prompts]
        rows.sort(key=lambda e: len(e[0]) + len(e[1]))
        for i in rng.permutation(pool):
            chunk = rows[i * batch_size : (i + 1) * batch_size]
            masks = None if episode is None else [r[2] for r in chunk]
            yield sft_batch(task, [(r[0], r[1]) for r in chunk], max_context, masks)


def evaluate(
    task: Task,
    model: LlamaModel,
    *,
    num_prompts: int,
    samples: int,
    temperature: float = 1.0,
    seed: int = 0,
    max_new_tokens: int = 300,
    max_batch: int = 32,
) -> dict[str, Any]:
    """Sample ``samples`` completions per prompt with ``TorchEngine``; mean reward, length
    stats (tokens generated, EOS included), the share of groups whose siblings are not all
    identical, failure reasons (when the task has ``verdict``) and a few rendered samples."""
    prompts = task.sample_prompts(num_prompts, np.random.default_rng(seed))
    cfg = EngineConfig(max_batch=max_batch, profile=False, eos_token_id=task.eos_token_id)
    engine = TorchEngine(model, cfg)
    for i, prompt in enumerate(prompts):
        for j in range(samples):
            params = SamplingParams(temperature=temperature, seed=seed * 1_000_003 + i * 997 + j)
            engine.add(ChunkRequest(f"{i}/{j}", prompt.token_ids, max_new_tokens, params=params))
    out: dict[str, tuple[int, ...]] = {}
    start = time.perf_counter()
    with torch.inference_mode():
        while engine.has_work():
            out.update((r.request_id, r.token_ids) for r in engine.step().finished)
    seconds = time.perf_counter() - start
    groups = [[out[f"{i}/{j}"] for j in range(samples)] for i in range(len(prompts))]
    rewards = [task.reward(p, c) for p, g in zip(prompts, groups, strict=True) for c in g]
    lengths = np.array([len(c) for g in groups for c in g])
    verdict = getattr(task, "verdict", None)
    reasons = (
        Counter(verdict(p, c) for p, g in zip(prompts, groups, strict=True) for c in g)
        if callable(verdict)
        else Counter[str]()
    )
    return {
        "reward_mean": float(np.mean(rewards)),
        "num_samples": len(rewards),
        "length_p50": float(np.percentile(lengths, 50)),
        "length_p90": float(np.percentile(lengths, 90)),
        "length_p99": float(np.percentile(lengths, 99)),
        "length_max": int(lengths.max()),
        "length_mean": float(lengths.mean()),
        "distinct_group_frac": float(np.mean([len(set(g)) > 1 for g in groups])),
        "verdicts": dict(reasons),
        "seconds": seconds,
        "tokens_per_s": float(lengths.sum() / seconds),
        "examples": [task.render(prompts[i], groups[i][0]) for i in range(min(3, len(prompts)))],
    }
