"""The replay side of `seer sim validate`: each live trace again, in the simulator.

Each trace's requests (with their recorded lengths, and with drafts their recorded
output) go through ``simulate`` under the same policy, knobs and seed, with this
machine's control-plane delays (``latencies``, from the traces) and the generators' time
outside engine steps (``steplog.overheads``), measured from the seed's live runs. A
block's speculation policies live on from one configuration's replay to the next, in
the order the live topology ran them. Per configuration the replay gives the simulated
makespan and tail (medians over speed draws when given pools), the uniform-price figures,
and the speed-normalized and paced diagnostics. See docs/sim-validation-method.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from actors.generator.options import GeneratorOptions
from actors.scheduler.options import SchedulerOptions
from pipeline.records.metrics import compute_metrics
from pipeline.rollout.live import POLICIES
from pipeline.sim import steplog
from pipeline.sim.acceptance import SiblingModel
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, SimRequest, simulate
from pipeline.sim.validate.live import _Block
from pipeline.sim.validate.speeds import (
    Pool,
    _at_speeds,
    _drawn,
    instance_paces,
    instance_speeds,
    pool_key,
)
from pipeline.sim.validate.stats import _rel, noise_floor, worst_noise_floor
from pipeline.sim.workload import from_record
from transport.messages import PROMPT_TAIL_TOKENS, RolloutRecord

__all__ = ["RANDOM_TEXT", "latencies"]

# drafts on older traces with no recorded output: the acceptance of random text
RANDOM_TEXT = SiblingModel(vocab=259, p_repeat=0.0, p_noise=1.0, p_jump=0.0)


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
        long_band=opts.long_band,
        probe_first=opts.probe_first,
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
    lat = latencies([rs[0] for rs in block.live.values()])
    runs = [s for per in block.steps.values() for s in per]
    over = steplog.overheads(runs) if runs else {}
    splits: dict[str, list[dict[str, float]]] = {}
    for policy, per in block.steps.items():
        splits.setdefault(policy + block.suffix, []).extend(steplog.time_split(s) for s in per)
    measured = {"dispatch": lat[0], "result": lat[1], "start": lat[2], **over}
    out = _BlockReplay({}, {}, splits, measured, list(runs), {})
    cfg = _sim_config(args.gen, args.chunk_size, bool(block.suffix), block.seed, lat, over)
    # the replayed policies price drafts by what the live ones read (information parity)
    cfg = dataclasses.replace(
        cfg,
        spec_step_times=block.spec_step_times(cfg.num_instances),
        # the warm-up's steps, which the live policies counted (the first replay only)
        spec_prelude=block.spec_prelude(cfg.num_instances),
    )
    # a live generator's speculation policy lives on through the block's rollouts (one
    # topology runs them in this order): each replay starts from the policies the
    # previous configuration's replay (at the table's price) left; the first, fresh
    state: Any = None
    for policy, records in block.live.items():
        state = _replay_config(block, policy, records[0], cfg, args, state, out)
    return out


@dataclasses.dataclass(frozen=True)
class _Case:
    """One configuration's replay: what every simulation of it shares."""

    reqs: list[SimRequest]
    policy: str
    cfg: SimConfig
    cost: CostModel
    acceptance: Any
    spec_state: Any  # the speculation policies it starts from


def _replay_config(
    block: _Block,
    policy: str,
    record: RolloutRecord,
    cfg: SimConfig,
    args: _ReplayArgs,
    state: Any,
    out: _BlockReplay,
) -> Any:
    """One configuration's replays into ``out``; returns the speculation policies the
    replay at the table's price left (the next configuration's start)."""
    name = policy + block.suffix
    prompt_tails = {p.prompt_id: p.token_ids[-PROMPT_TAIL_TOKENS:] for p in block.workload.prompts}
    # with drafts and recorded tokens, grouped drafts replay on the run's own output
    tokens = block.streams.get(policy)
    reqs = from_record(record, block.workload.max_new_tokens, tokens, prompt_tails)
    # no recorded tokens (older traces): drafts from the random-text table
    acc = args.acceptance if tokens is None else None
    case = _Case(reqs, policy, cfg, args.cost, acc, state)
    sim = simulate(reqs, policy, cfg, args.cost, acceptance=acc, spec_state=state)
    lm, sm = compute_metrics(record), compute_metrics(sim.record)
    row = out.rows.setdefault(name, {})
    if args.normalize and policy in block.steps:  # live engine steps against simulated
        _add(row, _diagnostics(case, block.steps[policy], record, sim.extra, lm))
    makespan, tail = sm["makespan_s"], sm["tail_s"]
    draw_key = (block.seed, POLICIES.index(policy), int(bool(block.suffix)))
    pool = _pool_of(args.pools, block, policy)
    if pool:
        spans, tails = _drawn(reqs, policy, cfg, args.cost, acc, pool, draw_key, state)
        makespan, tail = statistics.median(spans), statistics.median(tails)
        out.draws.setdefault(name, []).append((spans, tails))
    spread = _pool_of(args.spread_pools, block, policy)
    if spread:  # the same draws (key) from the centred pool
        table = _drawn(reqs, policy, cfg, args.cost, acc, spread, draw_key, state)
        row.setdefault("table_makespan_s", []).append(statistics.median(table[0]))
        row.setdefault("table_tail_s", []).append(statistics.median(table[1]))
    _add(row, _figures(lm, sm, makespan, tail))
    if block.seed == 0 and not block.suffix:
        out.examples[f"live {policy}"] = record
        out.examples[f"sim {policy}"] = sim.record
    return sim.extra["spec_policies"] if reqs[0].token_ids else None


def _pool_of(pools: dict[str, Pool] | None, block: _Block, policy: str) -> Pool | None:
    """The configuration's pool if there is one, else the block's setting's."""
    return (pools or {}).get(pool_key(block, policy)) or (pools or {}).get(pool_key(block))


def _add(row: dict[str, list[float]], figures: list[tuple[str, float]]) -> None:
    for key, value in figures:
        row.setdefault(key, []).append(float(value))


def _figures(
    lm: dict[str, Any], sm: dict[str, Any], makespan: float, tail: float
) -> list[tuple[str, float]]:
    """A configuration's live and simulated figures for one seed (``makespan``, ``tail``:
    the simulated ones, medians over the speed draws if any)."""
    return [
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
    ]


def _diagnostics(
    case: _Case,
    steps: list[list[dict[str, float]]],
    record: RolloutRecord,
    extra: dict[str, Any],
    lm: dict[str, Any],
) -> list[tuple[str, float]]:
    """Live engine steps against simulated, and the diagnostic replays: each instance at
    the speed its own live steps ran (``norm_*``), and at its live speed window by window
    (``paced_*``)."""
    logged = [s for per in steps for s in per]
    live_engine = sum(s["end_s"] - s["start_s"] for s in logged)
    reqs, policy, cfg, cost = case.reqs, case.policy, case.cfg, case.cost
    acc, state = case.acceptance, case.spec_state
    speeds = instance_speeds(steps, cost, cfg.num_instances)
    nm = _at_speeds(reqs, policy, cfg, cost, acc, speeds, state)
    paced = dataclasses.replace(
        cfg, instance_pace=instance_paces(steps, record, cost, cfg.num_instances)
    )
    pm = compute_metrics(
        simulate(reqs, policy, paced, cost, acceptance=acc, spec_state=state).record
    )
    return [
        ("live_num_steps", len(logged)),
        ("sim_num_steps", sum(extra["num_steps"])),
        ("live_engine_s", live_engine),
        ("sim_engine_s", sum(extra["engine_s"])),
        ("norm_makespan_s", nm["makespan_s"]),
        ("norm_makespan_err", _rel(nm["makespan_s"], lm["makespan_s"])),
        ("norm_tail_err", _rel(nm["tail_s"], lm["tail_s"])),
        ("paced_makespan_s", pm["makespan_s"]),
        ("paced_tail_s", pm["tail_s"]),
        ("paced_makespan_err", _rel(pm["makespan_s"], lm["makespan_s"])),
        ("paced_tail_err", _rel(pm["tail_s"], lm["tail_s"])),
    ]


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
    rows, examples, splits, measured_latencies, all_steps, draws = _merge(parts)
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


def _merge(parts: list[_BlockReplay]) -> tuple[Any, ...]:
    """The blocks' replays together, in block order, as one process would have added them:
    rows, examples, splits, latencies, steps and draws (per seed, the drawn replays)."""
    rows: dict[str, dict[str, list[float]]] = {}
    examples: dict[str, RolloutRecord] = {}
    splits: dict[str, list[dict[str, float]]] = {}
    measured_latencies: list[dict[str, float]] = []
    all_steps: list[list[dict[str, float]]] = []
    draws: dict[str, list[tuple[list[float], list[float]]]] = {}
    for part in parts:
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
    return rows, examples, splits, measured_latencies, all_steps, draws
