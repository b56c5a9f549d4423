"""Running scheduling policies live, as `seer bench` and `seer sim validate` both do.

``bench_generator``: the small random-weight model and KV budget the benches and the
simulator's validation run on CPU generators; ``POLICIES``: the scheduling policies they
compare; ``run_policies``: one topology (splitter, estimator, scheduler, 2 generator
processes) running every policy on the same workload, returning each rollout's record.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import Console

from pipeline.records.workload import Workload
from pipeline.rollout.api import Rollout, rollout_config
from transport.messages import PromptSpec, RolloutRecord, SamplingSpec

__all__ = ["POLICIES", "bench_generator", "run_policies"]

POLICIES = ("baseline", "divided", "context_aware", "oracle")


def bench_generator(quick: bool) -> dict[str, Any]:
    """The generator options of the bench topology: a small random-weight model, one
    thread, a small KV budget (``quick``: half the batch, a third of the KV)."""
    model = {
        "hidden": 128,
        "num_layers": 4,
        "num_heads": 4,
        "num_kv_heads": 4,
        "intermediate": 344,
        "max_context": 1024,
    }
    return {
        "model": model,
        "max_batch": 16 if quick else 32,
        "kv_budget_tokens": 2048 if quick else 6144,
        "num_threads": 1,
        # each generator on a core of its own: live makespans spread half as much over
        # seeds on this 2-core host (actors/generator/cpus.py)
        "pin_cores": True,
    }


async def run_policies(
    workload: Workload,
    gen: dict[str, Any],
    chunk_size: int,
    policies: tuple[str, ...],
    console: Console,
    repeats: int = 1,
    ready_timeout_s: float | None = None,
    temperature: float = 1.0,
    streams: dict[str, dict[str, tuple[int, ...]]] | None = None,
) -> dict[str, list[RolloutRecord]]:
    """Every policy's rollouts of ``workload`` on one topology. ``temperature``: the
    samples' (the bench model is random: at 1.0 siblings share no text; at a few hundredths
    they repeat each other as RL siblings do, so grouped drafts have something to find);
    ``streams``: filled with each policy's output tokens by request id (its last
    repeat's)."""
    prompts = [
        PromptSpec(prompt_id=p.prompt_id, token_ids=p.token_ids, forced_lens=p.target_lens)
        for p in workload.prompts
    ]
    sampling = SamplingSpec(
        temperature=temperature,
        seed=workload.seed,
        ignore_eos=True,
        max_new_tokens=workload.max_new_tokens,
    )
    # scheduling alone: random-model text gives drafts nothing to find (`seer bench drafts`)
    gen = {"spec": {"mode": "off"}, **gen}
    config = rollout_config(num_generators=2, chunk_size=chunk_size, generator=gen)
    if ready_timeout_s is not None:  # a loaded machine starts actors slowly
        config = dataclasses.replace(config, ready_timeout_s=ready_timeout_s)
    records: dict[str, list[RolloutRecord]] = {name: [] for name in policies}
    async with Rollout(config) as rollout:
        await rollout.generate(
            [p.token_ids for p in prompts[:2]], 2, SamplingSpec(max_new_tokens=8, ignore_eos=True)
        )  # warm up both generators
        for r in range(repeats):  # interleaved, so drift on the machine hits every policy
            for name in policies:
                with console.status(f"rollout {r + 1}/{repeats} under {name}"):
                    result = await rollout.generate_with_record(
                        prompts, workload.group_size, sampling, policy=name
                    )
                record = result.record
                records[name].append(record)
                if streams is not None:
                    streams[name] = {
                        s.request_id: s.token_ids for g in result.groups for s in g.samples
                    }
                console.print(f"{name} #{r + 1}: {record.makespan_s:.2f} s")
    return records
