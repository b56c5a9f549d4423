"""`seer bench agentic`: multi-turn episodes on the live pipeline, four policies side by side.

The workload (``pipeline.sim.agentic.AgenticWorkload``, drawn from a seed, as `seer sim
agentic` draws it at Seer's scale): per episode a turn count (lognormal around
``mean_turns``, a factor shared by a group's samples, so lengths are correlated within a
group), between turns an observation of uniform length and an environment latency
(lognormal, median and sigma below); every turn makes exactly ``turn_tokens`` action
tokens (ignore_eos: a turn ends at the episode's ``max_turn_tokens``). The synthetic
environment (``pipeline.bench.agentic_env``) sleeps each drawn latency and answers the
drawn observation; it runs in 2 environment actor processes (quick: 1) beside the
splitter, estimator, scheduler and 2 built-in generator processes on the bench's small
random model (real processes, real sockets). Each sample's episode budget is its drawn
length (+1), so the oracle ranks by the true episode length.

Policies: ``baseline`` = veRL-style (whole turns, groups pinned round-robin, the engine
queues) with every turn submitted as a fresh request (the rollout's ``sticky_turns=False``:
least-loaded, no KV affinity, as an agent loop over plain servers); ``divided``,
``context_aware``, ``oracle`` with sticky turns (the turn goes back to the generator
holding its KV unless the spread moves it). One topology runs them all, interleaved,
``repeats`` rollouts each (medians). JSON: ``{"policies": {name: {"makespan_s",
"tail_s", "throughput_tok_s", "reprefill_tokens", "lost"}}, "ratios": {name:
throughput / baseline's}}`` plus the workload and per-run makespans. ``lost``: samples
that did not come back, or came back ended by a failure (``error``, ``env_*``,
``bad_observation``). Throughput counts every token after the prompt (actions and
observations) over the makespan.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from typing import Any

import anyio
from rich.console import Console

from pipeline.records.metrics import compute_metrics
from pipeline.records.report import write_results
from pipeline.rollout.api import Rollout, RolloutResult, rollout_config
from pipeline.rollout.live import bench_generator
from pipeline.sim.agentic import POLICIES, AgenticWorkload, episodes, policy_table
from transport.messages import EpisodeSpec, PromptSpec, SamplingSpec

__all__ = ["FAILED", "QUICK", "WORKLOAD", "build", "run"]

ENVIRONMENT = "pipeline.bench.agentic_env:make_env"
FAILED = frozenset({"error", "env_error", "env_timeout", "env_lost", "bad_observation"})
PROMPT_LEN = 16

WORKLOAD = AgenticWorkload(
    num_groups=8,
    group_size=4,
    prompt_len=PROMPT_LEN,
    mean_turns=3.0,
    max_turns=8,
    mean_action=32,
    max_action=32,
    action_sigma=0.0,
    min_obs=8,
    max_obs=48,
    latency_median_s=0.1,
    latency_sigma=1.0,
    max_latency_s=1.0,
)
QUICK = dataclasses.replace(
    WORKLOAD,
    num_groups=4,
    mean_turns=2.0,
    max_turns=4,
    mean_action=16,
    max_action=16,
    min_obs=4,
    max_obs=16,
    latency_median_s=0.05,
    max_latency_s=0.3,
)


def build(w: AgenticWorkload) -> tuple[list[PromptSpec], EpisodeSpec, SamplingSpec]:
    """The live rollout's prompts (each sample's episode in ``env_info``, its length + 1 as
    its forced length), episode spec and sampling, from ``w``."""
    from pipeline.bench.agentic_env import env_info

    prompts = []
    for g, group in enumerate(episodes(w)):
        info = env_info(
            [len(ep.actions) for ep in group],
            [ep.observations for ep in group],
            [ep.latencies_s for ep in group],
        )
        token_ids = tuple((g * 11 + j * 5) % 200 + 3 for j in range(w.prompt_len))
        forced = tuple(ep.length + 1 for ep in group)
        prompts.append(
            PromptSpec(prompt_id=f"p{g}", token_ids=token_ids, forced_lens=forced, env_info=info)
        )
    spec = EpisodeSpec(
        environment=ENVIRONMENT,
        max_turns=w.max_turns,
        max_turn_tokens=w.mean_action,
        max_observation_tokens=w.max_obs,
    )
    limit = max(n for p in prompts for n in p.forced_lens)
    sampling = SamplingSpec(temperature=1.0, seed=w.seed, ignore_eos=True, max_new_tokens=limit)
    return prompts, spec, sampling


def _metrics(result: RolloutResult, num_samples: int) -> dict[str, Any]:
    m = compute_metrics(result.record)
    samples = [s for g in result.groups for s in g.samples]
    failed = sum(1 for s in samples if s.episode is None or s.episode.end_reason in FAILED)
    return {
        "makespan_s": m["makespan_s"],
        "tail_s": m["tail_s"],
        "throughput_tok_s": m["throughput_tok_s"],
        "reprefill_tokens": m["num_reprefilled_tokens"],
        "lost": num_samples - len(samples) + failed,
        "output_tokens": m["output_tokens"],
        "preemptions": m["num_preemptions"],
        "end_reasons": sorted({s.episode.end_reason for s in samples if s.episode}),
    }


async def _topology(
    w: AgenticWorkload,
    gen: dict[str, Any],
    chunk_size: int,
    policies: tuple[str, ...],
    repeats: int,
    environments: int,
    console: Console,
) -> dict[str, list[dict[str, Any]]]:
    prompts, spec, sampling = build(w)
    config = rollout_config(
        num_generators=2,
        chunk_size=chunk_size,
        generator={"spec": {"mode": "off"}, **gen},
        environments=environments,
    )
    num_samples = len(prompts) * w.group_size
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    async with Rollout(config) as rollout:
        await rollout.generate(
            [p.token_ids for p in prompts[:2]], 2, SamplingSpec(max_new_tokens=8, ignore_eos=True)
        )  # warm up both generators
        for r in range(repeats):  # interleaved, so drift on the machine hits every policy
            for name in policies:
                with console.status(f"rollout {r + 1}/{repeats} under {name}"):
                    result = await rollout.generate_with_record(
                        prompts,
                        w.group_size,
                        sampling,
                        policy=name,
                        episode=spec,
                        sticky_turns=name != "baseline",
                    )
                runs[name].append(_metrics(result, num_samples))
                console.print(f"{name} #{r + 1}: {result.record.makespan_s:.2f} s")
    return runs


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(sorted(runs, key=lambda m: m["makespan_s"])[len(runs) // 2])
    for key in ("makespan_s", "tail_s", "throughput_tok_s", "reprefill_tokens"):
        out[key] = statistics.median(m[key] for m in runs)
    out["lost"] = max(m["lost"] for m in runs)  # the worst run's: none may be lost
    out["makespans_s"] = [m["makespan_s"] for m in runs]
    return out


def run(
    json_path: str | None = None,
    quick: bool = False,
    repeats: int | None = None,
    chunk_size: int = 16,
    policies: tuple[str, ...] = POLICIES,
) -> dict[str, Any]:
    console = Console(width=140)
    repeats = repeats or (1 if quick else 3)
    w = QUICK if quick else WORKLOAD
    gen = bench_generator(quick)
    eps = [ep for g in episodes(w) for ep in g]
    console.print(
        f"agentic workload: {len(eps)} episodes, {sum(ep.length for ep in eps)} tokens, "
        f"turns mean {statistics.mean(len(ep.actions) for ep in eps):.1f} / max "
        f"{max(len(ep.actions) for ep in eps)}, env latency "
        f"{sum(sum(ep.latencies_s) for ep in eps):.1f} s in all"
    )
    environments = 1 if quick else 2
    runs = anyio.run(_topology, w, gen, chunk_size, policies, repeats, environments, console)
    table = {name: _median(runs[name]) for name in policies}
    base = table.get("baseline", {}).get("throughput_tok_s")
    ratios = {n: p["throughput_tok_s"] / base for n, p in table.items()} if base else {}
    summary = {
        "policies": table,
        "ratios": ratios,
        "workload": {
            **dataclasses.asdict(w),
            "num_episodes": len(eps),
            "total_tokens": sum(ep.length for ep in eps),
        },
        "generator": gen,
        "chunk_size": chunk_size,
        "repeats": repeats,
        "environment_actors": environments,
    }
    title = f"seer bench agentic (live: 2 generators; medians of {repeats})"
    console.print(policy_table(title, summary))
    if json_path:
        write_results(json_path, summary)
        console.print(f"wrote {json_path}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer bench agentic`'s own flags (beside --json and --quick)."""
    parser.add_argument("--repeats", type=int, help="runs per policy (the median is reported)")
    parser.add_argument("--chunk-size", type=int, default=16, help="tokens per chunk")


def run_args(args: argparse.Namespace) -> None:
    """`seer bench agentic` from its parsed flags."""
    run(args.json, quick=args.quick, repeats=args.repeats, chunk_size=args.chunk_size)
