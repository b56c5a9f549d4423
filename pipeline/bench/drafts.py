"""`seer bench drafts`: grouped speculative decoding on real rollouts of the default task.

All in one run, on the warm-started model of the embedded default task (countdown; the
same cached warm start `seer run` uses; `--model` takes another, e.g. a checkpoint after
some RL, whose siblings agree more), sampling at temperature 1 until each sample's own
end-of-sequence:
(c) rollout throughput of four variants side by side: no speculation, self-only suffix
    decoding (each request drafts from its own output, fixed draft length), grouped with a
    fixed draft length, and grouped adaptive (Seer: siblings' tokens via the draft store,
    marginal-benefit budget), plus "none_again", no speculation once more on a topology of
    its own: its ratio to "none" is the run's noise floor. Each variant is its own topology
    (2 generator processes) and first runs one untimed rollout (the adaptive policy learns
    its estimates online, as in RL where generators live across iterations); repeats are
    interleaved, forward then backward (the variant that runs just after a heavy one pays
    for its lingering work), with a pause between runs, and the table reports medians.
    With the same seeds every variant must produce the same samples (verification is
    lossless and coupled); the bench checks it.
(a) core speed of the suffix tree on the token streams of those rollouts: append tokens/s
    and speculate microseconds.
(b) mean acceptance length (bonus token included) replayed on those rollouts with 0 (self
    only), 1, 5 and all sibling references and 1 or 4 paths (the shape of Seer's Table 2):
    each response is decoded again token by token; at each step the tree (the references'
    complete responses plus the response's own tokens so far) drafts up to `g_max` tokens,
    and the accepted length is the longest draft path the real continuation follows.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
import numpy as np
from rich.console import Console

from actors.drafts.suffix_tree import HAVE_COMPILED_CORE, SuffixTree
from pipeline.bench.drafts_core import bench_core
from pipeline.records.report import results_table, write_results
from pipeline.rl.config import RunConfig, generator_options, options_table, warm_model
from pipeline.rl.report import LiveReport
from pipeline.rollout.api import Rollout, rollout_config
from pipeline.tasks import get_task
from transport.messages import PROMPT_TAIL_TOKENS, PromptSpec, SampleResult, SamplingSpec

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {"spec": {"mode": "off"}},
    "self": {"spec": {"mode": "self", "budget": "fixed"}},
    "group_fixed": {"spec": {"mode": "group", "budget": "fixed"}},
    "group_adaptive": {"spec": {"mode": "group", "budget": "adaptive"}},
    # the same as "none", run as its own topology: how far apart two identical variants
    # land in this run (the noise floor the other ratios must be read against)
    "none_again": {"spec": {"mode": "off"}},
}
REFS: tuple[int | None, ...] = (0, 1, 5, None)  # None = every sibling
PATHS = (1, 4)


def replay_acceptance(
    groups: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]],
    *,
    refs: int | None,
    paths: int,
    g_max: int = 8,
    min_prob: float = 0.1,
    max_match: int = 32,
    max_depth: int = 64,
) -> dict[str, float]:
    """Mean acceptance length over every response of `groups` ((prompt, responses) pairs)
    when it drafts from `refs` siblings' responses (None = all) and its own tokens."""
    steps = tokens = 0
    for prompt, responses in groups:
        tail = list(prompt[-PROMPT_TAIL_TOKENS:])
        for i, response in enumerate(responses):
            others = [r for j, r in enumerate(responses) if j != i]
            chosen = others if refs is None else others[:refs]
            tree = SuffixTree(max_depth)
            for j, ref in enumerate(chosen):
                tree.append(j + 1, [*tail, *ref])
            tree.append(0, tail)
            matcher = tree.matcher(max_match)
            matcher.feed(list(prompt[-max_match:]))
            pos = 0
            while pos < len(response):
                draft = matcher.speculate(max_tokens=g_max, top_k_paths=paths, min_prob=min_prob)
                accepted = accepted_len(draft.token_ids, draft.parents, response[pos:])
                new = list(response[pos : pos + accepted + 1])
                tree.append(0, new)
                matcher.feed(new)
                pos += len(new)
                steps += 1
                tokens += len(new)
    return {"mean_accept_len": tokens / steps if steps else 0.0, "steps": steps}


def accepted_len(token_ids: Sequence[int], parents: Sequence[int], truth: Sequence[int]) -> int:
    """Draft nodes a greedy-coupled verify step accepts when the real next tokens are
    `truth`: the depth of the longest root path of the draft tree that `truth` follows."""
    children: dict[tuple[int, int], int] = {
        (p, t): i for i, (t, p) in enumerate(zip(token_ids, parents, strict=True))
    }
    node = -1
    for depth, want in enumerate(truth):
        child = children.get((node, want))
        if child is None:
            return depth
        node = child
    return len(truth)


def acceptance_table(
    groups: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]], g_max: int = 8
) -> list[dict[str, Any]]:
    rows = []
    for refs in REFS:
        for paths in PATHS:
            res = replay_acceptance(groups, refs=refs, paths=paths, g_max=g_max)
            rows.append({"refs": "all" if refs is None else refs, "paths": paths, **res})
    return rows


def differing_samples(samples: dict[str, tuple[SampleResult, ...]]) -> dict[str, Any]:
    """Per variant whose samples are not those of "none", sample for sample: how many
    differ and, for the first few, the sample (prompt and index), both lengths, the first
    position where they part and both finish reasons (speculation is lossless and coupled,
    so there should be none)."""
    reference = samples["none"]
    out: dict[str, Any] = {}
    for name, got in samples.items():
        pairs = [(a, b) for a, b in zip(reference, got, strict=True) if a.token_ids != b.token_ids]
        if not pairs:
            continue
        first = []
        for a, b in pairs[:5]:
            shorter = min(len(a.token_ids), len(b.token_ids))
            at = next((i for i in range(shorter) if a.token_ids[i] != b.token_ids[i]), shorter)
            first.append(
                {
                    "sample": f"{a.prompt_id}/{a.index}",
                    "lengths": [len(a.token_ids), len(b.token_ids)],
                    "first_difference_at": at,
                    "finish_reasons": [a.finish_reason, b.finish_reason],
                }
            )
        out[name] = {"count": len(pairs), "first": first}
    return out


async def run_variants(
    prompts: Sequence[PromptSpec],
    group_size: int,
    sampling: SamplingSpec,
    gen: dict[str, Any],
    repeats: int,
    console: Console,
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, tuple[SampleResult, ...]]]:
    """Every variant's topology up at once; repeats interleaved; metrics per run, and the
    first run's samples of each variant."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    samples: dict[str, tuple[SampleResult, ...]] = {}
    with tempfile.TemporaryDirectory(prefix="seer-bench-") as tmp:
        async with AsyncExitStack() as stack:
            rollouts = {}
            for name, variant in VARIANTS.items():
                with console.status(f"starting the {name} topology"):
                    config = rollout_config(
                        num_generators=2, generator={**gen, **variant}, run_dir=tmp
                    )
                    rollouts[name] = await stack.enter_async_context(Rollout(config))
                with console.status(f"warming the {name} topology: one untimed rollout"):
                    # what an RL iteration meets: generators that have run before (the
                    # speculation policy's estimates are learnt online, per generator)
                    warm = dataclasses.replace(sampling, seed=(sampling.seed or 0) + 1000)
                    await rollouts[name].generate([p.token_ids for p in prompts], group_size, warm)
            names = list(rollouts)
            for r in range(repeats):  # forward, then backward: no variant always follows
                for name in names if r % 2 == 0 else names[::-1]:  # the same one
                    rollout = rollouts[name]
                    await anyio.sleep(1.0)  # the last variant's lingering work settles
                    with console.status(f"rollout {r + 1}/{repeats}: {name}"):
                        result = await rollout.generate_with_record(prompts, group_size, sampling)
                    metrics = result.metrics()
                    runs[name].append(metrics)
                    samples.setdefault(name, tuple(s for g in result.groups for s in g.samples))
                    console.print(
                        f"{name} #{r + 1}: {metrics['makespan_s']:.2f} s, "
                        f"{metrics['throughput_tok_s']:.0f} tok/s, "
                        f"accept len {metrics['mean_accept_len']:.2f}"
                    )
    return runs, samples


def run(
    json_path: str | None,
    quick: bool = False,
    repeats: int | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """`model`: a saved model to roll out (e.g. `runs/run-.../checkpoint/model.safetensors`,
    a policy after some RL); default: the cached warm start of `seer run`."""
    console = Console()
    cfg = RunConfig()
    task = get_task(cfg.task)
    model_path = model or warm_model(cfg, task, LiveReport(console))
    gen = options_table(generator_options(cfg, task, model_path))
    num_prompts = 32 if quick else 128
    repeats = repeats or (1 if quick else 4)
    task_prompts = task.sample_prompts(num_prompts, np.random.default_rng(20261129))
    prompts = [
        PromptSpec(prompt_id=f"p{i}", token_ids=p.token_ids) for i, p in enumerate(task_prompts)
    ]
    sampling = SamplingSpec(
        temperature=cfg.temperature,
        seed=7,
        max_new_tokens=cfg.max_new_tokens,
        stop_token_ids=(task.eos_token_id,),
    )
    console.print(
        f"{num_prompts} prompts x {cfg.group_size} samples of {cfg.task}, temperature "
        f"{cfg.temperature}, 2 generators per variant, {repeats} interleaved repeat(s)"
    )
    runs, samples = anyio.run(
        run_variants, prompts, cfg.group_size, sampling, gen, repeats, console
    )
    differing = differing_samples(samples)
    identical = not differing

    by_prompt: dict[str, list[list[int]]] = {}
    for s in samples["none"]:
        by_prompt.setdefault(s.prompt_id, []).append(list(s.token_ids))
    groups = [(p.token_ids, by_prompt[p.prompt_id]) for p in prompts]
    tails = [list(p.token_ids[-PROMPT_TAIL_TOKENS:]) for p in prompts]
    streams = [[*tails[i], *r] for i, (_, rs) in enumerate(groups) for r in rs]
    with console.status("suffix tree core speed"):
        core = bench_core(streams, repeats=3)
    with console.status("acceptance replay"):
        acceptance = acceptance_table(groups)
    rollout = _rollout_summary(runs)
    result = {
        "setup": {
            "task": cfg.task,
            "model": model_path,
            "prompts": num_prompts,
            "group_size": cfg.group_size,
            "repeats": repeats,
            "compiled_core": HAVE_COMPILED_CORE,
            "output_tokens": sum(len(r) for _, rs in groups for r in rs),
        },
        "core": core,
        "acceptance": acceptance,
        "rollout": rollout,
        "identical_samples": identical,
        # per variant whose samples differ from "none": how many, and the first few
        "differing_samples": differing,
    }
    _print(console, result)
    if json_path:
        write_results(json_path, result)
        console.print(f"wrote {json_path}")
    return result


def _rollout_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    base = statistics.median(m["throughput_tok_s"] for m in runs["none"])
    out = {}
    for name, ms in runs.items():
        tput = statistics.median(m["throughput_tok_s"] for m in ms)
        out[name] = {
            "throughput_tok_s": tput,
            "throughput_vs_none": tput / base if base else 0.0,
            "mean_accept_len": statistics.median(m["mean_accept_len"] for m in ms),
            "makespan_s": statistics.median(m["makespan_s"] for m in ms),
            "tail_s": statistics.median(m["tail_s"] for m in ms),
            "accept_rate": statistics.median(m["accept_rate"] for m in ms),
            "runs": [
                {k: m[k] for k in ("makespan_s", "throughput_tok_s", "mean_accept_len")} for m in ms
            ],
        }
    return out


def _print(console: Console, result: dict[str, Any]) -> None:
    core = result["core"]
    console.print(
        f"suffix tree ({core.get('impl', '?')}): append {core['append_tok_per_s'] / 1e6:.2f}M "
        f"tokens/s, speculate {core['speculate_us']:.1f} us per draft"
    )
    base = {r["paths"]: r["mean_accept_len"] for r in result["acceptance"] if r["refs"] == 0}
    acc_rows = []
    for r in result["acceptance"]:
        ratio = r["mean_accept_len"] / base[1] if base.get(1) else 0.0
        acc_rows.append(
            (str(r["refs"]), str(r["paths"]), f"{r['mean_accept_len']:.2f}", f"{ratio:.2f}x")
        )
    console.print(
        results_table(
            "mean acceptance length (bonus included), replayed on the rollouts",
            ("refs", "paths", "accept len", "vs self-only"),
            acc_rows,
        )
    )
    rollout_rows = [
        (
            name,
            f"{r['throughput_tok_s']:.0f}",
            f"{r['throughput_vs_none']:.2f}x",
            f"{r['makespan_s']:.2f}",
            f"{r['tail_s']:.2f}",
            f"{r['mean_accept_len']:.2f}",
        )
        for name, r in result["rollout"].items()
    ]
    console.print(
        results_table(
            "rollout, medians (same prompts and seeds)",
            ("variant", "tok/s", "vs none", "makespan s", "tail s", "accept len"),
            rollout_rows,
        )
    )
    same = "yes" if result["identical_samples"] else "NO"
    console.print(f"samples identical across variants (lossless, coupled sampling): {same}")
    for name, diff in result.get("differing_samples", {}).items():
        first = diff["first"][0]
        console.print(f"  {name}: {diff['count']} samples differ from none's; first: {first}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench drafts`'s own flags (beside --json and --quick)."""
    parser.add_argument("--repeats", type=int, help="runs per variant (the median is reported)")
    parser.add_argument("--model", help="a saved model to roll out (default: the warm start)")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench drafts` from its parsed flags."""
    run(args.json, quick=args.quick, repeats=args.repeats, model=args.model)
