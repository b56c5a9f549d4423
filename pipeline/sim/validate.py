"""`seer sim validate`: the simulator against live rollouts on this machine.

1. Cost table: ``seer profile``'s sweep of the built-in engine, measured separately from the
   runs it must predict (a twin generator process stepping alongside, as live). By default
   in passes between the live blocks (one before the first, one after each seed's block:
   ``profile.Sweep``, written as ``profile-interleaved.json`` beside the JSON), each point
   the median over the passes, so that the table describes the machine while it ran the
   live side; one profile taken minutes earlier priced the same work 0.67-1.14x on this
   host. The cached per-machine table (``profile.cached_table``; ``--reprofile`` measures it
   again) is replayed too and reported as ``fixed_table``; ``--fixed-table`` replays on it
   alone, ``--table`` on a given one.
2. Teacher-forced step time, in this process: the validation workload runs through the
   engine here; every step (decode rows, their context as the table keys it -- the longest
   row's for the built-in engine's table -- draft tokens, prefill tokens and requests) is
   priced by the table and compared with its measured time (``teacher_forced``).
3. Live: ``seer bench rollout``'s topology (2 generator processes, real splitter, estimator,
   scheduler, and draft store when speculating) runs each policy -- baseline, divided,
   context_aware, oracle, each without and with grouped drafts -- on the same workload for
   each of ``seeds`` seeds (at least 3); every run is saved as a trace, and the generators
   log every engine step (``SEER_STEP_LOG``, ``<json folder>/steps/``). The same pricing
   on the live-logged steps is ``step_time_err`` (``live_step_time``: by kind of step);
   ``live_time_split`` says where each generator's time went (engine calls, the loop
   between them, idle).
4. Replay: each trace's requests (with their recorded lengths) go through the simulator
   under the same policy, knobs and seed; the simulator's policies see what live ones see
   (estimates from finished siblings, telemetry at chunk ends), as late as live ones do.
   System constants of this machine, measured from the seed's live runs (pooled over its
   policies, not outcomes of one): the control plane's dispatch, result and start-up
   delays (``latencies``, from traces) and the generator's time outside engine steps, per
   step and per reported chunk (``steplog.overheads``). With drafts, speculation replays on
   the run's own output (saved beside its trace as ``tokens-<policy>+drafts-seed<n>.json``): each
   simulated instance runs the live generator's ``Speculator`` and MBA policy, drafting
   from real suffix trees over the siblings' recorded tokens as far as the simulation has
   generated them, each draft verified against the request's recorded continuation
   (``pipeline.sim.replay``); a generator's policy lives on through the block's
   configurations in the order the live topology ran them (the first starts fresh, as a
   new generator process does, having counted the warm-up rollout's steps as live:
   ``_prelude``), and prices drafts by the T(B, g) its live counterpart
   read (the engine's start-up measurement, each generator's own, recorded in the step
   log as ``step-times-gen<i>.json``; the table's when absent), not by the table: the
   live policy's grants follow what it measured, noise included. The bench model is
   random: at temperature 1.0 its siblings share no text and drafts find nothing, so the
   live side samples at ``TEMPERATURE`` (0.03), where siblings repeat each other
   (``acceptance`` in the JSON: what chains of 8 find in that output, by siblings ahead,
   beside Seer's figures); the work (forced lengths) is the same at any temperature.
   Instance speed: on this host two processes doing the same work run at different
   speeds, and a rollout waits for the slower one. Each replay is run ``DRAWS`` times with
   each instance's cost factor drawn from the *other* seeds' live generators with the same
   speculation setting (their logged engine time over the table's price for their own
   steps: ``cost_factors``, leave one seed out, so no run's own speed prices its replay;
   with drafts the topology runs slower on this host); simulated makespan and tail are the
   medians over the draws. ``table_*``: the factors around the table's level (their spread
   only); ``uniform_*``: every instance at the table's price.
Per configuration: medians over seeds of live and simulated makespan and tail time, their
relative errors (``makespan_err``, ``tail_err``; ``per_seed_*``: the median of the seeds'
own errors, a single live run's noise in each), the live spread (max - min over seeds,
relative to the median), the noise floor (``noise_floor_*``: the error a perfect simulator
would show were the live runs as noisy as its draws; ``worst_noise_floor_*``: the same
for the worst of the configurations, all resampled at once), preemptions both ways;
``ranking_match``: the eight configurations in the same order by median makespan live and
simulated; ``resolved_ranking_match``: the same on the pairs the live side can order at
all (paired by seed, a two-sided sign test at p <= 0.05: 8 of 9 seeds; none with fewer
than 6 seeds; ``_resolved_ranking``). ``config_pool``: the same
figures with each configuration's speeds drawn from the other seeds' runs of that
configuration alone (``cost_factors(..., by="config")``), since the configurations ran
at different speeds against the table.
5. Diagnostic, speed-normalized replay: the same replay with each simulated instance priced
   at the speed its live generator ran in that rollout (``instance_speeds``: its logged
   engine time over the table's price for its own steps). It takes the machine's speed from
   the run it checks, so it is no validation of the table; it checks the rest of the model
   (scheduling, KV, batching, overheads, latencies): ``norm_*`` keys per configuration,
   ``median_norm_makespan_err``, ``norm_ranking_match``.
   Paced (``paced_*``): each instance at its live speed window by window through the
   rollout (``instance_paces``), not one speed for the whole rollout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import math
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from rich.console import Console
from rich.table import Table

from actors.generator import ChunkRequest, SamplingParams
from actors.generator.cpus import pinned_thread
from actors.generator.options import GeneratorOptions
from actors.generator.step_log import ENV as STEP_LOG_ENV
from actors.generator.step_log import read_step_logs, read_step_times
from actors.scheduler.options import SchedulerOptions
from pipeline.bench.rollout import POLICIES, bench_generator, run_policies
from pipeline.launch import LaunchError
from pipeline.records.metrics import compute_metrics
from pipeline.records.plot import plot_timeline
from pipeline.records.trace import load_trace, save_trace
from pipeline.records.workload import Workload, make_workload
from pipeline.sim import profile as sim_profile
from pipeline.sim import steplog
from pipeline.sim.acceptance import (
    SEER_CHAIN_ACCEPTANCE,
    AcceptanceTable,
    SiblingModel,
    acceptance_from_streams,
    measure_acceptance,
)
from pipeline.sim.costmodel import CostModel, load_table
from pipeline.sim.simulator import SimConfig, simulate
from pipeline.sim.workload import from_record
from transport.messages import PROMPT_TAIL_TOKENS, RolloutRecord

__all__ = ["run", "teacher_forced_error"]

Pool = list[tuple[float, ...]]  # live rollouts' cost factors, one per generator, in order
RANDOM_TEXT = SiblingModel(vocab=259, p_repeat=0.0, p_noise=1.0, p_jump=0.0)
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


def latencies(records: list[RolloutRecord]) -> tuple[float, float, float]:
    """The live control plane's delays, from traces: dispatch (a chunk's dispatch to its
    first step: the 10th percentile of start - dispatched over chunks of capacity-bounded
    policies, where a dispatched chunk finds a free slot), result (a chunk's end to the
    next dispatch of the same request: the 10th percentile over consecutive chunks) and
    start (the rollout's clock start to its first dispatch: the scheduler first asks each
    generator for its load; the median over rollouts)."""
    starts, gaps = [], []
    first = [min(c.dispatched_s for c in rec.chunks) for rec in records if rec.chunks]
    for rec in records:
        by_req: dict[str, list[Any]] = {}
        for c in rec.chunks:
            by_req.setdefault(c.request_id, []).append(c)
            if rec.policy != "baseline":
                starts.append(c.start_s - c.dispatched_s)
        for chunks in by_req.values():
            chunks.sort(key=lambda c: c.chunk_seq)
            gaps += [b.dispatched_s - a.end_s for a, b in itertools.pairwise(chunks)]
    dispatch = float(np.percentile(starts, 10)) if starts else 0.0
    result = float(np.percentile(gaps, 10)) if gaps else dispatch
    start = statistics.median(first) if first else 0.0
    return max(dispatch, 0.0), max(result, 0.0), max(start, 0.0)


def _sim_config(
    gen: dict[str, Any],
    chunk_size: int,
    spec: bool,
    seed: int,
    lat: tuple[float, float, float],
    over: dict[str, float],
) -> SimConfig:
    opts = SchedulerOptions()
    return SimConfig(
        num_instances=2,
        max_batch=gen["max_batch"],
        kv_capacity=gen["kv_budget_tokens"],
        chunk_size=chunk_size,
        max_running_per_instance=gen["max_batch"],
        kv_high_watermark=opts.kv_high_watermark,
        affinity_spread=opts.affinity_spread,
        growth_reserve=opts.growth_reserve,
        starvation_s=opts.starvation_s,
        starvation_every=opts.starvation_every,
        kv_pool="local",
        spec="group" if spec else "off",
        max_steps=16,
        max_prefill_tokens=gen.get("max_prefill_tokens", GeneratorOptions().max_prefill_tokens),
        parked_eviction=gen.get("parked_eviction", GeneratorOptions().parked_eviction),
        seed=seed,
        dispatch_latency_s=lat[0],
        result_latency_s=lat[1],
        start_latency_s=lat[2],
        step_overhead_s=over.get("step_overhead_s", 0.0),
        report_s=over.get("report_s", 0.0),
    )


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


def instance_speeds(
    runs: list[list[dict[str, float]]], cost: CostModel, num_instances: int
) -> tuple[float, ...]:
    """Each live instance's engine time over the table's price for its own logged steps
    (instance order; 1.0 for an instance that logged none): how much slower or faster than
    the table that generator ran in that rollout. Input to the speed-normalized replay, a
    diagnostic that takes the machine's speed from the run it checks, so it tests the
    scheduling, KV and batching model, not the cost table."""
    ratios = [steplog.teacher_forced([steps], cost)["predicted_over_measured"] for steps in runs]
    ratios += [0.0] * (num_instances - len(ratios))
    return tuple(1.0 / r if r > 0 else 1.0 for r in ratios[:num_instances])


def _works(step: dict[str, float]) -> bool:
    """A logged step that ran the engine (decode rows or prefill) for a measurable time."""
    return step["end_s"] > step["start_s"] and bool(
        step["num_decode_rows"] or step["num_prefill_tokens"]
    )


PACE_WINDOW_S = 0.25  # the paced diagnostic's windows (the pace decorrelates over 1-5 s)


def instance_paces(
    runs: list[list[dict[str, float]]],
    record: RolloutRecord,
    cost: CostModel,
    num_instances: int,
    window_s: float = PACE_WINDOW_S,
) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Each live instance's speed through the rollout, window by window on the trace's
    clock: its logged engine time over the table's price for its steps that began in each
    ``window_s`` (a window whose steps the table prices below a fifth of it: the
    instance's whole-rollout factor, ``instance_speeds``). The clock is aligned by each
    instance's first chunk: it began with that instance's first working step (the median
    over instances). Input to the paced diagnostic, which takes the machine's speed as it
    varied within the run it checks, so it tests everything but the machine's pace."""
    whole = instance_speeds(runs, cost, num_instances)
    working = [[s for s in steps if _works(s)] for steps in runs]
    offsets = []
    for i, steps in enumerate(working):
        starts = [c.start_s for c in record.chunks if c.instance == i]
        if steps and starts:
            offsets.append(steps[0]["start_s"] - min(starts))
    if not offsets:
        return tuple(((0.0, f),) for f in whole)
    offset = statistics.median(offsets)
    out = []
    for i in range(num_instances):
        took: dict[int, float] = {}
        priced: dict[int, float] = {}
        for s in working[i] if i < len(working) else []:
            w = max(int((s["start_s"] - offset) // window_s), 0)
            took[w] = took.get(w, 0.0) + s["end_s"] - s["start_s"]
            priced[w] = priced.get(w, 0.0) + steplog.predict(s, cost)
        last = max(took, default=0)
        out.append(
            tuple(
                (
                    w * window_s,
                    took[w] / priced[w] if priced.get(w, 0.0) >= window_s / 5 else whole[i],
                )
                for w in range(last + 1)
            )
        )
    return tuple(out)


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


_Replayed = tuple[
    dict[str, dict[str, list[float]]],
    dict[str, RolloutRecord],
    dict[str, list[dict[str, float]]],
    list[dict[str, float]],
    list[list[dict[str, float]]],
    dict[str, float],
]


@dataclasses.dataclass(frozen=True)
class _ReplayArgs:
    gen: dict[str, Any]
    chunk_size: int
    cost: CostModel
    acceptance: Any
    normalize: bool
    pools: dict[str, Pool] | None
    spread_pools: dict[str, Pool] | None


@dataclasses.dataclass
class _BlockReplay:
    rows: dict[str, dict[str, list[float]]]
    examples: dict[str, RolloutRecord]
    splits: dict[str, list[dict[str, float]]]
    latencies: dict[str, float]
    steps: list[list[dict[str, float]]]
    draws: dict[str, list[tuple[list[float], list[float]]]]


def _replay_block(block: _Block, args: _ReplayArgs) -> _BlockReplay:
    """One block's replays (see ``_replay``)."""
    gen, chunk_size, cost, acceptance = args.gen, args.chunk_size, args.cost, args.acceptance
    normalize, pools, spread_pools = args.normalize, args.pools, args.spread_pools
    rows: dict[str, dict[str, list[float]]] = {}
    examples: dict[str, RolloutRecord] = {}
    splits: dict[str, list[dict[str, float]]] = {}
    all_steps: list[list[dict[str, float]]] = []
    draws: dict[str, list[tuple[list[float], list[float]]]] = {}
    lat = latencies([rs[0] for rs in block.live.values()])
    runs = [s for per in block.steps.values() for s in per]
    over = steplog.overheads(runs) if runs else {}
    all_steps += runs
    for policy, per in block.steps.items():
        splits.setdefault(policy + block.suffix, []).extend(steplog.time_split(s) for s in per)
    measured = {"dispatch": lat[0], "result": lat[1], "start": lat[2], **over}
    # a live generator's speculation policy lives on through the block's rollouts (one
    # topology runs them in this order): each replay starts from the policies the
    # previous configuration's replay (at the table's price) left; the first, fresh
    state: Any = None
    prompt_tails = {p.prompt_id: p.token_ids[-PROMPT_TAIL_TOKENS:] for p in block.workload.prompts}
    for policy, records in block.live.items():
        name = policy + block.suffix
        record = records[0]
        # with drafts and recorded tokens, grouped drafts replay on the run's own output
        tokens = block.streams.get(policy)
        reqs = from_record(record, block.workload.max_new_tokens, tokens, prompt_tails)
        cfg = _sim_config(gen, chunk_size, bool(block.suffix), block.seed, lat, over)
        # the replayed policies price drafts by what the live ones read (information parity)
        cfg = dataclasses.replace(
            cfg,
            spec_step_times=block.spec_step_times(cfg.num_instances),
            # the warm-up's steps, which the live policies counted (the first replay only)
            spec_prelude=block.spec_prelude(cfg.num_instances),
        )
        # no recorded tokens (older traces): drafts from the random-text table
        acc = acceptance if tokens is None else None
        sim = simulate(reqs, policy, cfg, cost, acceptance=acc, spec_state=state)
        start: Any = state
        state = sim.extra["spec_policies"] if reqs[0].token_ids else None
        lm, sm = compute_metrics(record), compute_metrics(sim.record)
        row = rows.setdefault(name, {})
        if normalize and policy in block.steps:  # live engine steps against simulated
            logged = [s for per in block.steps[policy] for s in per]
            live_engine = sum(s["end_s"] - s["start_s"] for s in logged)
            # diagnostic: each instance at the speed its own live steps ran
            speeds = instance_speeds(block.steps[policy], cost, cfg.num_instances)
            nm = _at_speeds(reqs, policy, cfg, cost, acc, speeds, start)
            # diagnostic: each instance at its live speed window by window
            paces = instance_paces(block.steps[policy], record, cost, cfg.num_instances)
            paced = dataclasses.replace(cfg, instance_pace=paces)
            pm = compute_metrics(
                simulate(reqs, policy, paced, cost, acceptance=acc, spec_state=start).record
            )
            for key, value in (
                ("live_num_steps", len(logged)),
                ("sim_num_steps", sum(sim.extra["num_steps"])),
                ("live_engine_s", live_engine),
                ("sim_engine_s", sum(sim.extra["engine_s"])),
                ("norm_makespan_s", nm["makespan_s"]),
                ("norm_makespan_err", _rel(nm["makespan_s"], lm["makespan_s"])),
                ("norm_tail_err", _rel(nm["tail_s"], lm["tail_s"])),
                ("paced_makespan_s", pm["makespan_s"]),
                ("paced_tail_s", pm["tail_s"]),
                ("paced_makespan_err", _rel(pm["makespan_s"], lm["makespan_s"])),
                ("paced_tail_err", _rel(pm["tail_s"], lm["tail_s"])),
            ):
                row.setdefault(key, []).append(float(value))
        makespan, tail = sm["makespan_s"], sm["tail_s"]
        draw_key = (block.seed, POLICIES.index(policy), int(bool(block.suffix)))
        pool = (pools or {}).get(pool_key(block, policy)) or (pools or {}).get(pool_key(block))
        if pool:
            spans, tails = _drawn(reqs, policy, cfg, cost, acc, pool, draw_key, start)
            makespan, tail = statistics.median(spans), statistics.median(tails)
            draws.setdefault(name, []).append((spans, tails))
        spread = (spread_pools or {}).get(pool_key(block, policy)) or (spread_pools or {}).get(
            pool_key(block)
        )
        if spread:  # the same draws (key) from the centred pool
            table = _drawn(reqs, policy, cfg, cost, acc, spread, draw_key, start)
            row.setdefault("table_makespan_s", []).append(statistics.median(table[0]))
            row.setdefault("table_tail_s", []).append(statistics.median(table[1]))
        for key, value in (
            ("live_makespan_s", lm["makespan_s"]),
            ("sim_makespan_s", makespan),
            ("per_seed_makespan_err", _rel(makespan, lm["makespan_s"])),
            ("uniform_makespan_s", sm["makespan_s"]),
            ("live_tail_s", lm["tail_s"]),
            ("sim_tail_s", tail),
            ("per_seed_tail_err", _rel(tail, lm["tail_s"])),
            ("uniform_tail_s", sm["tail_s"]),
            # the tail is the last 10% of requests (3 of 32): a small absolute
            # time, so its relative error is large; the absolute one beside it
            ("tail_abs_err_s", abs(tail - lm["tail_s"])),
            ("live_preemptions", lm["num_preemptions"]),
            ("sim_preemptions", sm["num_preemptions"]),
            ("live_accept_len", lm["mean_accept_len"]),
            ("sim_accept_len", sm["mean_accept_len"]),
        ):
            row.setdefault(key, []).append(float(value))
        if block.seed == 0 and not block.suffix:
            examples[f"live {policy}"] = record
            examples[f"sim {policy}"] = sim.record
    return _BlockReplay(rows, examples, splits, measured, all_steps, draws)


def _replay(
    blocks: list[_Block],
    gen: dict[str, Any],
    chunk_size: int,
    cost: CostModel,
    acceptance: Any,
    *,
    normalize: bool,
    pools: dict[str, Pool] | None = None,
    spread_pools: dict[str, Pool] | None = None,
) -> _Replayed:
    """Every block's traces through the simulator priced by ``cost``: per configuration the
    live and simulated figures seed by seed (``normalize``: also the speed-normalized
    replay; ``pools``: the simulated makespan and tail are medians over replays, each at
    one live rollout's cost factors from its block's pool (``pool_key``); ``spread_pools``:
    the same as ``table_*``; ``uniform_*``: every instance at the table's price), example
    records for the timeline, where the live generators' time went, the measured latencies
    and every logged step."""
    args = _ReplayArgs(gen, chunk_size, cost, acceptance, normalize, pools, spread_pools)
    workers = min(len(blocks), os.cpu_count() or 1)
    if workers > 1:  # blocks are independent: one process per core (spawned: no torch fork)
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            parts = list(pool.map(_replay_block, blocks, itertools.repeat(args)))
    else:
        parts = [_replay_block(block, args) for block in blocks]
    rows: dict[str, dict[str, list[float]]] = {}
    examples: dict[str, RolloutRecord] = {}
    splits: dict[str, list[dict[str, float]]] = {}
    measured_latencies: list[dict[str, float]] = []
    all_steps: list[list[dict[str, float]]] = []
    draws: dict[str, list[tuple[list[float], list[float]]]] = {}  # per seed, drawn replays
    for part in parts:  # in block order, as one process would have added them
        for name, row in part.rows.items():
            into = rows.setdefault(name, {})
            for key, values in row.items():
                into.setdefault(key, []).extend(values)
        examples.update(part.examples)
        for name, items in part.splits.items():
            splits.setdefault(name, []).extend(items)
        measured_latencies.append(part.latencies)
        all_steps += part.steps
        for name, got in part.draws.items():
            draws.setdefault(name, []).extend(got)
    for name, per_seed in draws.items():  # how noisy live medians are, were runs draws
        row = rows[name]
        row["noise_floor_makespan_err"] = [noise_floor([spans for spans, _ in per_seed])]
        row["noise_floor_tail_err"] = [noise_floor([tails for _, tails in per_seed])]
    worst = {}  # the worst configuration's noise floor, all configurations resampled
    if draws:
        worst = {
            "makespan": worst_noise_floor([[s for s, _ in d] for d in draws.values()]),
            "tail": worst_noise_floor([[t for _, t in d] for d in draws.values()]),
        }
    return rows, examples, splits, measured_latencies, all_steps, worst


DRAWS = 9  # speed draws per replay (odd: the median is one of them)


def pool_key(block: _Block, policy: str | None = None) -> str:
    """The cost-factor pool a block's replays draw from: its seed and speculation setting
    (``"2"``, ``"2+drafts"``), and with ``policy`` the configuration's (``"2+drafts:divided"``)."""
    return f"{block.seed}{block.suffix}" + (f":{policy}" if policy else "")


def cost_factors(blocks: list[_Block], cost: CostModel, by: str = "setting") -> dict[str, Pool]:
    """Per seed and speculation setting (``pool_key``): the cost factors the live generator
    processes ran at, from every *other* seed's runs with the same setting, so that no
    run's own speed prices its replay (leave one seed out): each generator's logged engine
    time in a rollout over the table's price for its own steps, a rollout's generators
    together: the pool sets how fast the live topology runs, relative to the table, and
    how unevenly (``centred``: the spread alone). On a shared host two processes doing the
    same work run at different speeds and a rollout waits for the slower one, so a replay
    with every instance at one price finishes early and with a short tail. But the
    machine's pace moves both at once: over five quick runs one rollout's two generators'
    factors correlated 0.72-0.84, and their speeds differed half as much (median |log
    ratio| 0.06-0.09) as factors drawn apart from the pool would (0.12-0.24), so a draw is
    one whole rollout's factors, never one instance's from here and another's from there.
    The setting matters: with drafts the topology runs a draft store and each generator
    drafts beside its engine steps, on the same 2 cores, and its steps run slower against
    the table (in one run 1.12-1.22x on steps with and without drafts alike, against
    1.04-1.07x in the same seeds without speculation). A rollout in which a generator
    logged no step is left out. Empty for a seed with no other seed's step logs.
    ``by="config"``: per configuration (policy and setting) instead, from the other seeds'
    runs of the same configuration (``pool_key(block, policy)``): on this host the
    configurations' steps ran at different speeds against the table (on one quick run's
    plain decode steps, 0.84x the table's price under the baseline, 1.12x under divided),
    which pooling them turns into a bias per configuration."""
    per_block: dict[tuple[int, str, str], Pool] = {}
    for block in blocks:
        for policy, runs in block.steps.items():
            if runs and all(runs):
                factors = instance_speeds(runs, cost, len(runs))
                key = (block.seed, block.suffix, policy if by == "config" else "")
                per_block.setdefault(key, []).append(factors)
    pools: dict[str, Pool] = {}
    for block in blocks:
        for policy in block.steps if by == "config" else [""]:
            pool = [
                f
                for (other, setting, of), fs in per_block.items()
                if other != block.seed and setting == block.suffix and of == policy
                for f in fs
            ]
            if pool:
                pools[pool_key(block, policy or None)] = sorted(pool)
    return pools


def centred(pool: Pool) -> Pool:
    """``pool`` over the median of its factors: the table sets the level, the pool only the
    spread."""
    middle = statistics.median(f for factors in pool for f in factors)
    return [tuple(f / middle for f in factors) for factors in pool]


def _at_speeds(
    reqs: Any,
    policy: str,
    cfg: SimConfig,
    cost: CostModel,
    acceptance: Any,
    speeds: tuple[float, ...],
    spec_state: Any = None,
) -> dict[str, Any]:
    """The metrics of one replay with each instance's steps costing ``speeds[i]`` times the
    table's price."""
    config = dataclasses.replace(cfg, instance_speed=speeds)
    sim = simulate(reqs, policy, config, cost, acceptance=acceptance, spec_state=spec_state)
    return compute_metrics(sim.record)


def _drawn(
    reqs: Any,
    policy: str,
    cfg: SimConfig,
    cost: CostModel,
    acceptance: Any,
    pool: Pool,
    key: tuple[int, ...],
    spec_state: Any = None,
) -> tuple[list[float], list[float]]:
    """Makespans and tails of ``DRAWS`` replays, each with the instances' cost factors of
    one live rollout drawn from ``pool`` (seeded by ``key``: the same draws every time)."""
    if any(len(factors) != cfg.num_instances for factors in pool):
        raise ValueError(f"every draw in the pool needs {cfg.num_instances} cost factors")
    rng = np.random.default_rng(key)
    makespans, tails = [], []
    for index in rng.integers(len(pool), size=DRAWS):
        speeds = tuple(float(f) for f in pool[index])
        m = _at_speeds(reqs, policy, cfg, cost, acceptance, speeds, spec_state)
        makespans.append(m["makespan_s"])
        tails.append(m["tail_s"])
    return makespans, tails


def noise_floor(draws: list[list[float]], samples: int = 400, seed: int = 0) -> float:
    """The error a perfect simulator would show against live runs as noisy as its draws:
    ``draws`` holds each seed's drawn replays; were each seed's live run one of them, the
    median over seeds of one run per seed would miss the median over seeds of the draws'
    medians (what is reported as simulated) by this much, relatively (the median over
    ``samples`` resamplings)."""
    return statistics.median(_floor_errors(draws, np.random.default_rng(seed), samples))


def worst_noise_floor(
    per_config: list[list[list[float]]], samples: int = 400, seed: int = 0
) -> float:
    """The worst configuration's error a perfect simulator would show: each resampling
    gives every configuration (``per_config``: its seeds' draws, as ``noise_floor`` takes)
    an error as ``noise_floor`` does and keeps the largest; the median over resamplings.
    The worst of eight noisy errors is larger than their median: this is the level the
    worst configuration's error sits at when the simulator is exact."""
    rng = np.random.default_rng(seed)
    errors = [_floor_errors(draws, rng, samples) for draws in per_config]
    return float(statistics.median(max(each) for each in zip(*errors, strict=True)))


def _floor_errors(draws: list[list[float]], rng: np.random.Generator, samples: int) -> list[float]:
    centre = statistics.median(statistics.median(d) for d in draws)
    if not centre > 0:
        return [0.0] * samples
    errs = []
    for _ in range(samples):
        picked = [d[int(rng.integers(len(d)))] for d in draws]
        errs.append(abs(statistics.median(picked) - centre) / centre)
    return errs


def _summarize(rows: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Per configuration: medians over seeds, their errors (``makespan_err``: the simulated
    median against the live one; ``per_seed_makespan_err``: the median of the seeds'
    errors, each a single live run's noise included), the live spread and the per-seed
    makespans."""
    policies: dict[str, dict[str, Any]] = {}
    for name, row in rows.items():
        lives = row["live_makespan_s"]
        med = statistics.median(lives)
        medians = {k: statistics.median(v) for k, v in row.items()}
        policies[name] = {
            **medians,
            # the medians over seeds, simulated against live
            "makespan_err": _rel(medians["sim_makespan_s"], med),
            "tail_err": _rel(medians["sim_tail_s"], medians["live_tail_s"]),
            "uniform_makespan_err": _rel(medians["uniform_makespan_s"], med),
            "uniform_tail_err": _rel(medians["uniform_tail_s"], medians["live_tail_s"]),
            **(
                {
                    "table_makespan_err": _rel(medians["table_makespan_s"], med),
                    "table_tail_err": _rel(medians["table_tail_s"], medians["live_tail_s"]),
                }
                if "table_makespan_s" in medians
                else {}
            ),
            "live_spread": (max(lives) - min(lives)) / med if med > 0 else 0.0,
            "live_makespans_s": lives,
            "sim_makespans_s": row["sim_makespan_s"],
        }
    return policies


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
    decoding rows (``can_pay``), so its first exploration falls due that much earlier. On
    one full run's seed 0 the baseline's replayed drafts, from fresh policies, had 1,420
    tokens of the probes and 10,745 of the others accepted against 1,643 and 12,377 live
    (one instance granted a fifth of its live drafts early on); counting the warm-up's 8
    and 7 steps, 1,635 and 12,369."""
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


def _acceptance_summary(blocks: list[_Block], fallback: Any) -> dict[str, Any]:
    """Mean acceptance length of a full chain, by siblings ahead, in the live output the
    +drafts replays drafted from (the median over those runs), beside Seer's figures."""
    tables = [b.recorded_acceptance(p) for b in blocks for p in POLICIES if b.streams.get(p)]
    if not tables:
        info = fallback.as_dict() if fallback is not None else {}
        return {"source": "random text" if fallback is not None else "none", **info}
    lengths: dict[str, list[float]] = {}
    for t in tables:
        for r in t.refs:
            lengths.setdefault(str(r), []).append(t.expected_tokens(r, t.g_max))
    return {
        "source": "recorded",
        "mean_acceptance_length_gmax": {
            k: round(statistics.median(v), 3) for k, v in lengths.items()
        },
        "seer_published": {str(k): v for k, v in SEER_CHAIN_ACCEPTANCE.items()},
    }


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b if b > 0 else 0.0


def run(
    json_path: str | None = None,
    *,
    quick: bool = False,
    size: str | None = None,
    seeds: int = 3,
    table: str | None = None,
    chunk_size: int = 128,
    drafts: bool = True,
    traces: str | None = None,
    reprofile: bool = False,
    interleave: bool = True,
    temperature: float = TEMPERATURE,
) -> dict[str, Any]:
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    size = size or ("quick" if quick else "full")
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")
    console = Console(width=180)
    folder = Path(json_path).parent if json_path else Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    gen = bench_generator(size != "full")
    solo: CostModel | None = None  # the table measured alone, for comparison
    fixed: str | None = table  # a table measured once (the cache's or --table)
    if table is None:
        console.print("cost table: this machine's profile (cached, or measured now) ...")
        path, was_cached = sim_profile.cached_table(gen, size != "full", refresh=reprofile)
        fixed = str(path)
        console.print(f"cost table {fixed} ({'from the cache' if was_cached else 'measured now'})")
        alone, _ = sim_profile.cached_table(gen, size != "full", refresh=reprofile, twin=False)
        solo = CostModel.from_table(load_table(alone), sim_profile.SHAPE)
    assert fixed is not None
    fixed_data = load_table(fixed)
    fixed_cost = CostModel.from_table(fixed_data, sim_profile.SHAPE)
    # the table the replays use: by default measured in passes between the live blocks
    sweep: sim_profile.Sweep | None = None
    if interleave and table is None and traces is None:
        sweep = sim_profile.sweep_of(gen, sim_profile.grid(size != "full"))
        console.print("profile pass 1 (the table is measured between the live blocks)")
        sim_profile.measure_pass(sweep)
    acceptance = measure_acceptance(RANDOM_TEXT) if drafts else None
    variants = [("", {"spec": {"mode": "off"}})]
    if drafts:
        variants.append(("+drafts", {"spec": {"mode": "group"}}))
    blocks: list[_Block] = []
    for seed in range(seeds):
        workload = _workload(size, seed)
        for suffix, spec in variants:
            steps_dir = Path(traces or folder) / "steps" / f"seed{seed}{suffix}"
            streams: Streams = {}
            if traces:  # replay the traces an earlier run recorded (no live runs)
                live = {
                    p: [load_trace(Path(traces) / f"trace-{p}{suffix}-seed{seed}.json")]
                    for p in POLICIES
                }
                if suffix:
                    streams = _load_streams(Path(traces), suffix, seed)
            else:
                wanted = streams if suffix else None  # the tokens drafts replay on
                run_gen = {**gen, **spec}
                live = _live(workload, run_gen, chunk_size, console, steps_dir, temperature, wanted)
                for policy, records in live.items():
                    save_trace(records[0], folder / f"trace-{policy}{suffix}-seed{seed}.json")
                    if suffix:  # what grouped drafts replay on
                        out = folder / f"tokens-{policy}{suffix}-seed{seed}.json"
                        out.write_text(json.dumps(streams.get(policy, {})))
                if sweep is not None:
                    console.print(f"profile pass {sweep.passes + 1}")
                    sim_profile.measure_pass(sweep)
            recorded = read_step_times(steps_dir) if steps_dir.is_dir() else {}
            steps, warm_up = _step_logs(steps_dir)
            blocks.append(_Block(seed, suffix, workload, live, steps, streams, recorded, warm_up))
    if sweep is not None:
        table_data = sweep.table()
        table = str(folder / "profile-interleaved.json")
        Path(table).write_text(json.dumps(table_data, indent=1))
        console.print(
            f"cost table {table}: {sweep.passes} passes between the live blocks, "
            f"median point spread {table_data['info']['decode_spread_median']:.1%}"
        )
    else:
        table, table_data = fixed, fixed_data
    cost = CostModel.from_table(table_data, sim_profile.SHAPE)
    twin = table_data.get("info", {}).get("twin")
    with sim_profile.twin_running(gen, twin) if twin else contextlib.nullcontext():
        # in the conditions the table was measured in (a twin generator stepping alongside)
        teacher = teacher_forced_error(_workload(size, 0), gen, cost)
    console.print(
        f"teacher-forced: {teacher['num_steps']} engine steps, total step time error "
        f"{teacher['step_time_err']:.1%} (per step, median {teacher['per_step_median_err']:.1%})"
    )
    pools = cost_factors(blocks, cost)
    rows, examples, splits, measured_latencies, all_steps, worst_floor = _replay(
        blocks,
        gen,
        chunk_size,
        cost,
        acceptance,
        normalize=True,
        pools=pools,
        spread_pools={key: centred(pool) for key, pool in pools.items()},
    )
    policies = _summarize(rows)
    for name, parts in splits.items():  # where the live generators' time went
        policies[name]["live_time_split"] = {
            k: statistics.median(p[k] for p in parts) for k in parts[0]
        }
    live_rank = sorted(policies, key=lambda n: policies[n]["live_makespan_s"])
    sim_rank = sorted(policies, key=lambda n: policies[n]["sim_makespan_s"])
    errs = [p["makespan_err"] for p in policies.values()]
    live_steps = steplog.teacher_forced(all_steps, cost) if all_steps else None
    if live_steps is not None and solo is not None:  # which conditions the live steps match
        live_steps["solo_table"] = steplog.teacher_forced(all_steps, solo)
    by_config = cost_factors(blocks, cost, by="config")
    config_pool = _config_pool(blocks, gen, chunk_size, cost, acceptance, by_config, live_rank)
    once: dict[str, Any] | None = None
    if sweep is not None:  # the same replays priced by the table measured once, earlier
        fixed_rows = _replay(
            blocks,
            gen,
            chunk_size,
            fixed_cost,
            acceptance,
            normalize=False,
            pools=cost_factors(blocks, fixed_cost),
        )[0]
        fixed_policies = _summarize(fixed_rows)
        fixed_errs = [p["makespan_err"] for p in fixed_policies.values()]
        fixed_rank = sorted(fixed_policies, key=lambda n: fixed_policies[n]["sim_makespan_s"])
        once = {
            "cost_table": fixed,
            "median_makespan_err": statistics.median(fixed_errs),
            "worst_makespan_err": max(fixed_errs),
            "median_tail_err": statistics.median(p["tail_err"] for p in fixed_policies.values()),
            "ranking_match": fixed_rank == live_rank,
            "step_time_err": (
                steplog.teacher_forced(all_steps, fixed_cost)["step_time_err"]
                if all_steps
                else None
            ),
        }
    summary = {
        "policies": policies,
        "ranking_match": live_rank == sim_rank,
        "live_ranking": live_rank,
        "sim_ranking": sim_rank,
        **_resolved_ranking(policies),
        # the protocol's step-time check on steps logged by the live generators (both at
        # once, with the control plane); the in-process run's when no step log exists
        "step_time_err": (live_steps or teacher)["step_time_err"],
        "live_step_time": live_steps,
        "teacher_forced": teacher,
        "median_makespan_err": statistics.median(errs),
        "worst_makespan_err": max(errs),
        "median_tail_err": statistics.median(p["tail_err"] for p in policies.values()),
        # the same with each seed's error, a single live run's noise in it
        "median_per_seed_makespan_err": _median_of(policies, "per_seed_makespan_err"),
        "median_per_seed_tail_err": _median_of(policies, "per_seed_tail_err"),
        # every instance at the table's price (no speed draws)
        "median_uniform_makespan_err": _median_of(policies, "uniform_makespan_err"),
        "median_uniform_tail_err": _median_of(policies, "uniform_tail_err"),
        "uniform_ranking_match": live_rank
        == sorted(policies, key=lambda n: policies[n]["uniform_makespan_s"]),
        # what a perfect simulator would show, the live runs as noisy as the draws
        "median_noise_floor_makespan_err": _median_of(policies, "noise_floor_makespan_err"),
        "median_noise_floor_tail_err": _median_of(policies, "noise_floor_tail_err"),
        "worst_noise_floor_makespan_err": worst_floor.get("makespan"),
        "worst_noise_floor_tail_err": worst_floor.get("tail"),
        # cost factors drawn around the table's level (the pools' spread only)
        "median_table_makespan_err": _median_of(policies, "table_makespan_err"),
        "median_table_tail_err": _median_of(policies, "table_tail_err"),
        # the live generators' cost factors the draws came from, per seed and setting
        "cost_factor_pools": pools,
        # diagnostic (not the validation): each instance at its own live speed
        "median_norm_makespan_err": _median_of(policies, "norm_makespan_err"),
        "median_norm_tail_err": _median_of(policies, "norm_tail_err"),
        # diagnostic: each instance at its live speed window by window (instance_paces)
        "median_paced_makespan_err": _median_of(policies, "paced_makespan_err"),
        "median_paced_tail_err": _median_of(policies, "paced_tail_err"),
        **_norm_ranking(policies, live_rank),
        "seeds": seeds,
        "temperature": None if traces else temperature,  # the live samples'
        "acceptance": _acceptance_summary(blocks, acceptance),
        "latencies_s": measured_latencies,
        "generator": gen,
        "chunk_size": chunk_size,
        "cost_table": table,
        "cost_table_info": table_data.get("info", {}),
        # "interleaved": passes between the live blocks; "fixed": measured once (cache/--table)
        "table_source": "interleaved" if sweep is not None else "fixed",
        "fixed_table": once,
        # the speed draws per configuration rather than per speculation setting
        "config_pool": config_pool,
        "load_average": _load_average(),
    }
    console.print(_table(summary))
    summary["timeline_png"] = str(plot_timeline(examples, folder / "sim-validate-timeline.png"))
    out = Path(json_path) if json_path else folder / "sim-validate.json"
    out.write_text(json.dumps(summary, indent=2))
    console.print(f"wrote {out} and {summary['timeline_png']}")
    return summary


def _config_pool(
    blocks: list[_Block],
    gen: dict[str, Any],
    chunk_size: int,
    cost: CostModel,
    acceptance: Any,
    pools: dict[str, Pool],
    live_rank: list[str],
) -> dict[str, Any] | None:
    """The replays again, each configuration's speed drawn from the other seeds' runs of
    that configuration (``cost_factors(..., by="config")``); None without such pools."""
    if not pools:
        return None
    rows = _replay(blocks, gen, chunk_size, cost, acceptance, normalize=False, pools=pools)[0]
    policies = _summarize(rows)
    errs = {name: p["makespan_err"] for name, p in policies.items()}
    worst = max(errs, key=errs.__getitem__)
    return {
        "median_makespan_err": statistics.median(errs.values()),
        "worst_makespan_err": errs[worst],
        "worst_config": worst,
        "median_tail_err": statistics.median(p["tail_err"] for p in policies.values()),
        "median_noise_floor_makespan_err": _median_of(policies, "noise_floor_makespan_err"),
        "median_noise_floor_tail_err": _median_of(policies, "noise_floor_tail_err"),
        "ranking_match": live_rank == sorted(policies, key=lambda n: policies[n]["sim_makespan_s"]),
        **_resolved_ranking(policies),
        "policies": {
            name: {k: p[k] for k in ("sim_makespan_s", "sim_tail_s", "makespan_err", "tail_err")}
            for name, p in policies.items()
        },
    }


def _norm_ranking(policies: dict[str, dict[str, Any]], live_rank: list[str]) -> dict[str, Any]:
    """The speed-normalized replay's ranking against the live one (all pairs, and the pairs
    the live side resolves); empty without step logs."""
    if not all("norm_makespan_s" in p for p in policies.values()):
        return {}
    rank = sorted(policies, key=lambda n: policies[n]["norm_makespan_s"])
    resolved = _resolved_ranking(policies, "norm_makespan_s")
    return {
        "norm_ranking_match": rank == live_rank,
        "norm_resolved_ranking_match": resolved["resolved_ranking_match"],
        "norm_resolved_pairs_agree": resolved["resolved_pairs_agree"],
    }


def _median_of(policies: dict[str, dict[str, Any]], key: str) -> float | None:
    values = [p[key] for p in policies.values() if key in p]
    return statistics.median(values) if values else None


RANK_ALPHA = 0.05  # a pair is resolved live when its paired sign test over seeds is this sure


def sign_test(wins: int, n: int) -> float:
    """The exact two-sided sign test: the chance that ``n`` fair coin flips split at least
    as unevenly as ``wins`` : ``n - wins``."""
    if n == 0:
        return 1.0
    k = min(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / (1 << n))


# the fewest seeds on which a configuration winning every seed is resolved (6: p = 1/32)
MIN_RESOLVING_SEEDS = next(n for n in range(1, 64) if sign_test(n, n) <= RANK_ALPHA)


def _test_size(n: int) -> float:
    """How often the sign test over ``n`` seeds resolves a pair that has no order at all."""
    return sum(math.comb(n, k) for k in range(n + 1) if sign_test(k, n) <= RANK_ALPHA) / (1 << n)


def _resolved_ranking(
    policies: dict[str, dict[str, Any]], sim_key: str = "sim_makespan_s"
) -> dict[str, Any]:
    """The ranking on the pairs the live side can tell apart: paired by seed (every
    configuration ran each seed's workload), one configuration finished first on so many
    seeds that an exact two-sided sign test gives p <= ``RANK_ALPHA`` (with 9 seeds: 8 of
    9; fewer than 6 seeds can resolve no pair). ``resolved_ranking_match``: the simulator
    orders every resolved pair as live does, by its median makespans; None when no pair is
    resolved (nothing was checked). ``chance_resolved_pairs``: how many pairs the test
    would resolve were no configuration faster than another (each agreeing by chance
    half the time); ``ranking_match`` asks for every pair, including those whose order live
    is noise."""
    resolved = agree = 0
    seeds = 0
    for a, b in itertools.combinations(policies, 2):
        la, lb = policies[a]["live_makespans_s"], policies[b]["live_makespans_s"]
        if len(la) != len(lb):
            raise ValueError(f"{a} and {b} ran {len(la)} and {len(lb)} seeds: not paired")
        seeds = len(la)
        wins = sum(x < y for x, y in zip(la, lb, strict=True))
        n = sum(x != y for x, y in zip(la, lb, strict=True))  # ties say nothing
        if sign_test(wins, n) <= RANK_ALPHA:
            resolved += 1
            live_first = 2 * wins > n
            sim_first = policies[a][sim_key] < policies[b][sim_key]
            agree += live_first == sim_first
    pairs = len(policies) * (len(policies) - 1) // 2
    return {
        "num_pairs": pairs,
        "num_resolved_pairs": resolved,
        "resolved_pairs_agree": agree,
        "resolved_ranking_match": agree == resolved if resolved else None,
        "chance_resolved_pairs": pairs * _test_size(seeds) if seeds else 0.0,
    }


def _resolved_caption(summary: dict[str, Any]) -> str:
    resolved = summary["num_resolved_pairs"]
    seeds = summary.get("seeds", 0)
    if not resolved and seeds < MIN_RESOLVING_SEEDS:
        return (
            f"{seeds} seeds resolve no pair live: a sign test over seeds needs "
            f"{MIN_RESOLVING_SEEDS} or more (--seeds)"
        )
    if not resolved:
        return "no pair resolved live by a sign test over seeds"
    return (
        f"{summary['resolved_pairs_agree']} of {resolved} pairs resolved live by a sign test "
        f"over seeds agree; {summary['chance_resolved_pairs']:.1f} would resolve by chance"
    )


def _table(summary: dict[str, Any]) -> Table:
    t = Table(
        title=f"seer sim validate (medians over {summary['seeds']} seeds; live = 2 CPU generators)"
    )
    for c in (
        "config",
        "live s",
        "sim s",
        "err",
        "live spread",
        "live tail",
        "sim tail",
        "tail err",
        "preempt live/sim",
        "accept len live/sim",
        "steps live/sim",
        "engine s live/sim",
        "err, no draws",
        "err at live speed",
    ):
        t.add_column(c, justify="right")
    for name, p in summary["policies"].items():
        t.add_row(
            name,
            f"{p['live_makespan_s']:.2f}",
            f"{p['sim_makespan_s']:.2f}",
            f"{p['makespan_err']:.1%}",
            f"{p['live_spread']:.1%}",
            f"{p['live_tail_s']:.2f}",
            f"{p['sim_tail_s']:.2f}",
            f"{p['tail_err']:.1%}",
            f"{p['live_preemptions']:.0f}/{p['sim_preemptions']:.0f}",
            f"{p['live_accept_len']:.2f}/{p['sim_accept_len']:.2f}",
            f"{p.get('live_num_steps', 0):.0f}/{p.get('sim_num_steps', 0):.0f}",
            f"{p.get('live_engine_s', 0):.2f}/{p.get('sim_engine_s', 0):.2f}",
            f"{p['uniform_makespan_err']:.1%}",
            f"{p['norm_makespan_err']:.1%}" if "norm_makespan_err" in p else "-",
        )
    t.caption = (
        f"makespan error median {summary['median_makespan_err']:.1%}, worst "
        f"{summary['worst_makespan_err']:.1%}; tail error median {summary['median_tail_err']:.1%}; "
        f"ranking match: {summary['ranking_match']} ({_resolved_caption(summary)}); "
        f"teacher-forced step time error {summary['step_time_err']:.1%}"
    )
    if summary.get("median_noise_floor_makespan_err") is not None:
        t.caption += (
            f"; noise floor (a perfect simulator, live runs as noisy as its draws): makespan "
            f"{summary['median_noise_floor_makespan_err']:.1%} (worst configuration "
            f"{summary['worst_noise_floor_makespan_err']:.1%}), tail "
            f"{summary['median_noise_floor_tail_err']:.1%}"
        )
    if summary.get("cost_factor_pools"):
        t.caption += (
            f". Sim = median of {DRAWS} replays, each at the generators' cost factors of one "
            f"live rollout drawn from the other seeds' of the same setting; drawn around the "
            f"table's level instead: makespan error median "
            f"{summary['median_table_makespan_err']:.1%}, tail "
            f"{summary['median_table_tail_err']:.1%}; every instance at the table's price: "
            f"{summary['median_uniform_makespan_err']:.1%}, tail "
            f"{summary['median_uniform_tail_err']:.1%}"
        )
    t.caption += (
        f". Seed by seed: makespan error median {summary['median_per_seed_makespan_err']:.1%}"
        f", tail {summary['median_per_seed_tail_err']:.1%}"
    )
    by_config = summary.get("config_pool")
    if by_config:
        t.caption += (
            f". Speeds drawn per configuration instead (the other seeds' runs of the same "
            f"configuration): makespan error median {by_config['median_makespan_err']:.1%}, "
            f"worst {by_config['worst_makespan_err']:.1%} ({by_config['worst_config']}), tail "
            f"{by_config['median_tail_err']:.1%}, ranking match {by_config['ranking_match']}"
        )
    fixed = summary.get("fixed_table")
    if fixed:
        t.caption += (
            f". Table: {summary['cost_table_info'].get('passes')} profile passes between the "
            f"live blocks; the cached table instead: makespan error median "
            f"{fixed['median_makespan_err']:.1%}"
        )
        if fixed["step_time_err"] is not None:
            t.caption += f", step time error {fixed['step_time_err']:.1%}"
    live = summary.get("live_step_time") or {}
    spread = live.get("per_run_predicted_over_measured")
    if spread:  # the same engine and table, generator by generator, rollout by rollout
        t.caption += (
            f"; table / live step time per generator and rollout {min(spread):.2f}-"
            f"{max(spread):.2f} (median {statistics.median(spread):.2f})"
        )
    if live.get("cpu_over_wall"):
        t.caption += f"; live engine CPU / wall {live['cpu_over_wall']:.2f}"
    if summary.get("median_norm_makespan_err") is not None:
        t.caption += (
            f". Diagnostic, each instance at its own live speed (from its step log): makespan"
            f" error median {summary['median_norm_makespan_err']:.1%}, tail "
            f"{summary['median_norm_tail_err']:.1%}, ranking match "
            f"{summary.get('norm_ranking_match')}"
        )
        if summary["num_resolved_pairs"]:
            t.caption += (
                f" ({summary.get('norm_resolved_pairs_agree')} of "
                f"{summary['num_resolved_pairs']} resolved pairs agree)"
            )
    if summary.get("median_paced_makespan_err") is not None:
        t.caption += (
            f"; at its live speed window by window ({PACE_WINDOW_S:g} s): makespan "
            f"{summary['median_paced_makespan_err']:.1%}, tail "
            f"{summary['median_paced_tail_err']:.1%}"
        )
    return t
