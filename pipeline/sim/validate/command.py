"""`seer sim validate`'s steps, in order: tables, live blocks, replays, figures, report.

``run`` takes the cost table (the cached or given one; by default another measured in
passes between the live blocks), runs every policy live for each seed and speculation
setting (or reads an earlier run's traces), checks the table on the engine's steps
(teacher-forced), replays every trace in the simulator at the live generators' drawn
speeds, and reports the errors per configuration. The method, its choices and what they
were measured against: docs/sim-validation-method.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from actors.generator.step_log import read_step_times
from pipeline.records.trace import load_trace, save_trace
from pipeline.records.workload import Workload
from pipeline.rollout.live import POLICIES, bench_generator
from pipeline.sim import profile as sim_profile
from pipeline.sim import steplog
from pipeline.sim.acceptance import measure_acceptance
from pipeline.sim.costmodel import CostModel, load_table
from pipeline.sim.validate.live import (
    SIZES,
    TEMPERATURE,
    Streams,
    _Block,
    _live,
    _load_streams,
    _step_logs,
    _workload,
    teacher_forced_error,
)
from pipeline.sim.validate.replay import RANDOM_TEXT, _replay
from pipeline.sim.validate.report import report
from pipeline.sim.validate.speeds import Pool, centred, cost_factors
from pipeline.sim.validate.stats import (
    _acceptance_summary,
    _figures,
    _median_of,
    _resolved_ranking,
    _summarize,
)
from transport.messages import RolloutRecord

__all__ = ["run"]


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What every step of one validation run shares."""

    size: str
    gen: dict[str, Any]
    chunk_size: int
    folder: Path  # where traces, step logs and the report go
    console: Console
    temperature: float
    traces: str | None  # replay an earlier run's traces (no live runs)


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
    """Validate the simulator against live rollouts on this machine; write the JSON at
    ``json_path`` (default: a temporary folder) and return it."""
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
    setup = _Setup(size, gen, chunk_size, folder, console, temperature, traces)
    fixed, solo = _fixed_table(setup, table, reprofile)
    fixed_data = load_table(fixed)
    fixed_cost = CostModel.from_table(fixed_data, sim_profile.SHAPE)
    # the table the replays use: by default measured in passes between the live blocks
    sweep: sim_profile.Sweep | None = None
    if interleave and table is None and traces is None:
        sweep = sim_profile.sweep_of(gen, sim_profile.grid(size != "full"))
        console.print("profile pass 1 (the table is measured between the live blocks)")
        sim_profile.measure_pass(sweep)
    acceptance = measure_acceptance(RANDOM_TEXT) if drafts else None
    blocks = _blocks(setup, seeds, drafts, sweep)
    if sweep is not None:
        table, table_data = _interleaved_table(setup, sweep)
    else:
        table, table_data = fixed, fixed_data
    cost = CostModel.from_table(table_data, sim_profile.SHAPE)
    teacher = _teacher(setup, cost, table_data)
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
    live_steps = steplog.teacher_forced(all_steps, cost) if all_steps else None
    if live_steps is not None and solo is not None:  # which conditions the live steps match
        live_steps["solo_table"] = steplog.teacher_forced(all_steps, solo)
    by_config = cost_factors(blocks, cost, by="config")
    config_pool = _config_pool(setup, blocks, cost, acceptance, by_config, live_rank)
    once: dict[str, Any] | None = None
    if sweep is not None:  # the same replays priced by the table measured once, earlier
        once = _once(setup, blocks, fixed, fixed_cost, acceptance, live_rank, all_steps)
    summary = {
        **_figures(policies, live_rank, live_steps, teacher, worst_floor, pools),
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
    report(summary, examples, console, folder, json_path)
    return summary


def _fixed_table(setup: _Setup, table: str | None, reprofile: bool) -> tuple[str, CostModel | None]:
    """The table measured once (``table``, else this machine's cached profile, measured
    now if absent) and, from the cache, the table measured alone (no twin), for
    comparison."""
    if table is not None:
        return table, None
    gen, quick, console = setup.gen, setup.size != "full", setup.console
    console.print("cost table: this machine's profile (cached, or measured now) ...")
    path, was_cached = sim_profile.cached_table(gen, quick, refresh=reprofile)
    console.print(f"cost table {path} ({'from the cache' if was_cached else 'measured now'})")
    alone, _ = sim_profile.cached_table(gen, quick, refresh=reprofile, twin=False)
    return str(path), CostModel.from_table(load_table(alone), sim_profile.SHAPE)


def _blocks(
    setup: _Setup, seeds: int, drafts: bool, sweep: sim_profile.Sweep | None
) -> list[_Block]:
    """Each seed's runs of every policy, without and (``drafts``) with speculation: live,
    with a profile pass of ``sweep`` after each block, or read from ``setup.traces``."""
    variants = [("", {"spec": {"mode": "off"}})]
    if drafts:
        variants.append(("+drafts", {"spec": {"mode": "group"}}))
    blocks: list[_Block] = []
    for seed in range(seeds):
        workload = _workload(setup.size, seed)
        for suffix, spec in variants:
            steps_dir = Path(setup.traces or setup.folder) / "steps" / f"seed{seed}{suffix}"
            if setup.traces:  # replay the traces an earlier run recorded (no live runs)
                live, streams = _recorded(Path(setup.traces), suffix, seed)
            else:
                live, streams = _live_block(setup, workload, spec, suffix, seed, steps_dir)
                if sweep is not None:
                    setup.console.print(f"profile pass {sweep.passes + 1}")
                    sim_profile.measure_pass(sweep)
            recorded = read_step_times(steps_dir) if steps_dir.is_dir() else {}
            steps, warm_up = _step_logs(steps_dir)
            blocks.append(_Block(seed, suffix, workload, live, steps, streams, recorded, warm_up))
    return blocks


def _recorded(
    traces: Path, suffix: str, seed: int
) -> tuple[dict[str, list[RolloutRecord]], Streams]:
    """A block's traces and output tokens as an earlier run saved them."""
    live = {p: [load_trace(traces / f"trace-{p}{suffix}-seed{seed}.json")] for p in POLICIES}
    return live, _load_streams(traces, suffix, seed) if suffix else {}


def _live_block(
    setup: _Setup,
    workload: Workload,
    spec: dict[str, Any],
    suffix: str,
    seed: int,
    steps_dir: Path,
) -> tuple[dict[str, list[RolloutRecord]], Streams]:
    """One block live; saves each run's trace and, with drafts, its output tokens."""
    streams: Streams = {}
    wanted = streams if suffix else None  # the tokens drafts replay on
    run_gen = {**setup.gen, **spec}
    live = _live(
        workload, run_gen, setup.chunk_size, setup.console, steps_dir, setup.temperature, wanted
    )
    for policy, records in live.items():
        save_trace(records[0], setup.folder / f"trace-{policy}{suffix}-seed{seed}.json")
        if suffix:  # what grouped drafts replay on
            out = setup.folder / f"tokens-{policy}{suffix}-seed{seed}.json"
            out.write_text(json.dumps(streams.get(policy, {})))
    return live, streams


def _interleaved_table(setup: _Setup, sweep: sim_profile.Sweep) -> tuple[str, dict[str, Any]]:
    """The table measured in passes between the live blocks, saved beside the JSON."""
    table_data = sweep.table()
    table = str(setup.folder / "profile-interleaved.json")
    Path(table).write_text(json.dumps(table_data, indent=1))
    setup.console.print(
        f"cost table {table}: {sweep.passes} passes between the live blocks, "
        f"median point spread {table_data['info']['decode_spread_median']:.1%}"
    )
    return table, table_data


def _teacher(setup: _Setup, cost: CostModel, table_data: dict[str, Any]) -> dict[str, float]:
    """The table's step-time error on the workload run in this process, in the conditions
    the table was measured in (a twin generator stepping alongside)."""
    twin = table_data.get("info", {}).get("twin")
    with sim_profile.twin_running(setup.gen, twin) if twin else contextlib.nullcontext():
        teacher = teacher_forced_error(_workload(setup.size, 0), setup.gen, cost)
    setup.console.print(
        f"teacher-forced: {teacher['num_steps']} engine steps, total step time error "
        f"{teacher['step_time_err']:.1%} (per step, median {teacher['per_step_median_err']:.1%})"
    )
    return teacher


def _once(
    setup: _Setup,
    blocks: list[_Block],
    fixed: str,
    fixed_cost: CostModel,
    acceptance: Any,
    live_rank: list[str],
    all_steps: list[list[dict[str, float]]],
) -> dict[str, Any]:
    """The same replays priced by the table measured once, earlier."""
    fixed_rows = _replay(
        blocks,
        setup.gen,
        setup.chunk_size,
        fixed_cost,
        acceptance,
        normalize=False,
        pools=cost_factors(blocks, fixed_cost),
    )[0]
    fixed_policies = _summarize(fixed_rows)
    fixed_errs = [p["makespan_err"] for p in fixed_policies.values()]
    fixed_rank = sorted(fixed_policies, key=lambda n: fixed_policies[n]["sim_makespan_s"])
    return {
        "cost_table": fixed,
        "median_makespan_err": statistics.median(fixed_errs),
        "worst_makespan_err": max(fixed_errs),
        "median_tail_err": statistics.median(p["tail_err"] for p in fixed_policies.values()),
        "ranking_match": fixed_rank == live_rank,
        "step_time_err": (
            steplog.teacher_forced(all_steps, fixed_cost)["step_time_err"] if all_steps else None
        ),
    }


def _config_pool(
    setup: _Setup,
    blocks: list[_Block],
    cost: CostModel,
    acceptance: Any,
    pools: dict[str, Pool],
    live_rank: list[str],
) -> dict[str, Any] | None:
    """The replays again, each configuration's speed drawn from the other seeds' runs of
    that configuration (``cost_factors(..., by="config")``); None without such pools."""
    if not pools:
        return None
    gen, chunk_size = setup.gen, setup.chunk_size
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


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`seer sim validate`'s own flags (beside --json)."""
    parser.add_argument("--quick", action="store_true", help="the small workload")
    parser.add_argument("--seeds", type=int, default=3, help="live seeds (>= 3)")
    parser.add_argument("--table", help="a `seer profile` table (default: the cached one)")
    parser.add_argument("--reprofile", action="store_true", help="measure the cached table again")
    parser.add_argument("--no-drafts", action="store_true", help="skip the +drafts runs")
    parser.add_argument(
        "--fixed-table",
        action="store_true",
        help="replay on the cached table only (default: a table measured in passes between "
        "the live blocks, the cached one compared)",
    )
    parser.add_argument("--traces", help="replay the traces in this folder (no live runs)")
    parser.add_argument(
        "--temperature",
        type=float,
        default=TEMPERATURE,
        help=f"the live samples' temperature (default {TEMPERATURE}: the random bench model's "
        "siblings repeat each other, so grouped drafts find text; at 1.0 they share none)",
    )


def run_args(args: argparse.Namespace) -> None:
    """`seer sim validate` from its parsed flags."""
    run(
        args.json,
        quick=args.quick,
        seeds=args.seeds,
        table=args.table,
        drafts=not args.no_drafts,
        traces=args.traces,
        reprofile=args.reprofile,
        interleave=not args.fixed_table,
        temperature=args.temperature,
    )
