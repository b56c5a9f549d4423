"""The live side of `seer sim validate`: the policies run live, and what they logged.

``_live`` runs every policy on one topology (``pipeline.rollout.live``) with its
generators logging each engine step; a seed's runs with one speculation setting make a
``_Block`` (traces, step logs, output tokens, the T(B, g) each live speculation policy
read, the warm-up's steps), read back by ``_step_logs`` and ``_load_streams`` when
replaying an earlier run's traces. ``teacher_forced_error`` runs the workload through the
engine in this process and prices every step by the table. See
docs/sim-validation-method.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.cpus import pinned_thread
from actors.generator.step_log import ENV as STEP_LOG_ENV
from actors.generator.step_log import read_step_logs
from pipeline.launch import LaunchError
from pipeline.records.workload import Workload, make_workload
from pipeline.rollout.live import POLICIES, run_policies
from pipeline.sim import profile as sim_profile
from pipeline.sim import steplog
from pipeline.sim.acceptance import AcceptanceTable, acceptance_from_streams
from pipeline.sim.costmodel import CostModel
from transport.messages import RolloutRecord

__all__ = ["QUICK_MEAN", "SIZES", "TEMPERATURE", "Streams", "teacher_forced_error"]

# the live samples' temperature: the random bench model's siblings repeat each other there
# (grouped drafts of 8 hold ~1.8 tokens with 3 siblings' streams, measured on its output)
TEMPERATURE = 0.03


SIZES = ("tiny", "quick", "full")


QUICK_MEAN = 200


def _workload(size: str, seed: int) -> Workload:
    if size == "tiny":  # for tests: seconds per rollout
        return make_workload(num_groups=4, group_size=2, mean_len=20, max_len=40, seed=seed)
    if size == "quick":  # seconds per rollout; KV-bound (2 x 2,048 KV tokens, ~7K needed)
        return make_workload(
            num_groups=8, group_size=4, mean_len=QUICK_MEAN, max_len=600, seed=seed
        )
    return make_workload(num_groups=12, group_size=8, mean_len=300, max_len=900, seed=seed)


def teacher_forced_error(
    workload: Workload, gen: dict[str, Any], cost: CostModel
) -> dict[str, float]:
    """Run the workload in-process, log every engine step, price each with the table."""
    engine = sim_profile._engine({**gen, "kv_budget_tokens": gen["kv_budget_tokens"]})
    params = SamplingParams(temperature=1.0, ignore_eos=True)
    for p in workload.prompts:
        for k, n in enumerate(p.target_lens):
            engine.add(ChunkRequest(f"{p.prompt_id}-{k}", p.token_ids, n, params=params))
    measured, predicted, errors = 0.0, 0.0, []
    with pinned_thread(sim_profile.cores(gen, 0)):  # as generator 0 runs
        while engine.has_work():
            start = time.perf_counter()
            result = engine.step()
            took = time.perf_counter() - start
            for done in result.finished:  # a finished request's KV goes, as live generators
                engine.release(done.request_id)  # release it (parked, it inflated the context)
            if not result.num_decode_rows and not result.num_prefill_tokens:
                continue
            guess = steplog.price(
                cost,
                result.num_decode_rows,
                result.num_decode_context_tokens,
                result.num_decode_max_context,
                result.num_draft_tokens,
                result.num_prefill_tokens,
                result.num_prefill_requests,
                result.num_draft_max,
            )
            measured += took
            predicted += guess
            errors.append(abs(guess - took) / took)
    return {
        "step_time_err": abs(predicted - measured) / measured,
        "per_step_median_err": statistics.median(errors),
        "num_steps": len(errors),
        "measured_s": measured,
        "predicted_s": predicted,
    }


Streams = dict[str, dict[str, tuple[int, ...]]]  # policy -> request id -> output tokens


def _live(
    workload: Workload,
    gen: dict[str, Any],
    chunk_size: int,
    console: Console,
    steps: Path,
    temperature: float,
    streams: Streams | None,
) -> dict[str, list[RolloutRecord]]:
    """The four policies live, one topology, its generators logging their steps into
    ``steps`` and each policy's output tokens into ``streams`` (if given); a topology that fails to
    start (a loaded machine can miss the launcher's readiness deadline) is tried once
    more."""
    before = os.environ.get(STEP_LOG_ENV)
    try:
        for attempt in range(2):
            shutil.rmtree(steps, ignore_errors=True)
            os.environ[STEP_LOG_ENV] = str(steps)  # the launcher passes it to the actors
            try:
                go = functools.partial(
                    run_policies,
                    workload,
                    gen,
                    chunk_size,
                    POLICIES,
                    console,
                    1,
                    300.0,
                    temperature=temperature,
                    streams=streams,
                )
                return anyio.run(go)
            except LaunchError:
                if attempt:
                    raise
                console.print("topology did not start; trying once more")
    finally:
        if before is None:
            os.environ.pop(STEP_LOG_ENV, None)
        else:
            os.environ[STEP_LOG_ENV] = before
    raise AssertionError("unreachable")


def _every_instance(by_instance: dict[int, list[Any]], num_instances: int) -> tuple[Any, ...]:
    """``by_instance``'s lists as tuples in instance order; empty unless every instance has
    one."""
    if sorted(by_instance) != list(range(num_instances)):
        return ()
    return tuple(tuple(by_instance[i]) for i in range(num_instances))


@dataclasses.dataclass
class _Block:
    """One seed's live runs of every policy with one speculation setting."""

    seed: int
    suffix: str  # "" or "+drafts"
    workload: Workload
    live: dict[str, list[RolloutRecord]]
    steps: dict[str, list[list[dict[str, float]]]]  # policy -> each generator's steps
    # +drafts blocks: policy -> its run's output tokens by request id
    streams: Streams = dataclasses.field(default_factory=dict)
    # instance -> the (B, g, seconds) its live speculation policy priced drafts by
    step_times: dict[int, list[tuple[int, int, float]]] = dataclasses.field(default_factory=dict)
    # instance -> the decode batch sizes of its steps before the first policy's rollout
    prelude: dict[int, list[int]] = dataclasses.field(default_factory=dict)

    def spec_step_times(self, num_instances: int) -> tuple[tuple[tuple[int, int, float], ...], ...]:
        """What each live generator's policy priced drafts by, for the replay's policies;
        empty when not every generator recorded it (the table's T(B, g) then)."""
        return _every_instance(self.step_times, num_instances)

    def spec_prelude(self, num_instances: int) -> tuple[tuple[int, ...], ...]:
        """The steps each live generator's policy counted before the block's first rollout
        (the warm-up's), for the replay's fresh policies; empty when not logged."""
        return _every_instance(self.prelude, num_instances)

    def recorded_acceptance(self, policy: str) -> AcceptanceTable:
        """What chains of drafts find in this run's recorded output, by siblings ahead."""
        tokens = self.streams[policy]
        groups: dict[str, list[tuple[int, ...]]] = {}
        for r in self.live[policy][0].requests:
            groups.setdefault(r.group_id, []).append(tokens[r.request_id])
        return acceptance_from_streams(list(groups.values()))


def _step_logs(
    folder: Path,
) -> tuple[dict[str, list[list[dict[str, float]]]], dict[int, list[int]]]:
    """One read of a block's step logs (empty when absent): policy -> each generator's
    logged steps in that policy's rollout (the topology ran a warm-up rollout, then
    ``POLICIES`` in order), and the warm-up's steps as ``_prelude`` takes them."""
    if not folder.is_dir():
        return {}, {}
    logs = read_step_logs(folder)
    ids = sorted(logs, key=lambda r: (len(r), r))
    if len(ids) < len(POLICIES):
        return {}, {}
    runs = ids[-len(POLICIES) :]
    steps = {  # each policy's runs in instance order
        p: [per for _, per in sorted(logs[rid].items())]
        for p, rid in zip(POLICIES, runs, strict=True)
    }
    return steps, _prelude([logs[rid] for rid in ids[: -len(POLICIES)]])


def _prelude(warm_up: list[dict[int, list[dict[str, float]]]]) -> dict[int, list[int]]:
    """instance -> the decode batch sizes of its logged steps in the rollouts before the
    first policy's (the topology's warm-up): a live speculation policy counts every step with
    decoding rows (``can_pay``), so its first exploration falls due that much earlier
    (docs/sim-validation-method.md, "The warm-up's steps")."""
    out: dict[int, list[int]] = {}
    for rollout in warm_up:
        for instance, steps in rollout.items():
            rows = [int(s["num_decode_rows"]) for s in steps if s["num_decode_rows"] > 0]
            out.setdefault(instance, []).extend(rows)
    return out


def _load_streams(folder: Path, suffix: str, seed: int) -> Streams:
    """The output tokens saved beside a seed's traces (absent for traces recorded before
    they were saved: those replay on random text)."""
    out: Streams = {}
    for p in POLICIES:
        path = folder / f"tokens-{p}{suffix}-seed{seed}.json"
        if path.exists():
            out[p] = {rid: tuple(t) for rid, t in json.loads(path.read_text()).items()}
    return out
