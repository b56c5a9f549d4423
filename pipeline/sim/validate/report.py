"""The report of `seer sim validate`: the table, its caption, the JSON file and timeline.

One row per configuration (live and simulated makespan and tail, their errors, the
diagnostics); the caption states the summary figures: error medians, the ranking and the
resolved pairs, the noise floor, the speed draws' alternatives, the table's source and
the diagnostic replays.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from pipeline.records.plot import drawn, maybe_plot_timeline
from pipeline.records.report import results_table, write_results
from pipeline.sim.validate.speeds import DRAWS, PACE_WINDOW_S
from pipeline.sim.validate.stats import MIN_RESOLVING_SEEDS
from transport.messages import RolloutRecord

__all__ = ["report"]

COLUMNS = (
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
)


def report(
    summary: dict[str, Any],
    examples: dict[str, RolloutRecord],
    console: Console,
    folder: Path,
    json_path: str | None,
) -> None:
    """Print the table, plot the example timelines, write the JSON (adds its paths to
    ``summary``)."""
    console.print(_table(summary))
    png = maybe_plot_timeline(examples, folder / "sim-validate-timeline.png")
    summary["timeline_png"] = str(png) if png else None
    out = write_results(json_path or folder / "sim-validate.json", summary)
    console.print(f"wrote {out} and {drawn(png)}")


def _row(name: str, p: dict[str, Any]) -> list[str]:
    return [
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
    ]


def _table(summary: dict[str, Any]) -> Table:
    return results_table(
        f"seer sim validate (medians over {summary['seeds']} seeds; live = 2 CPU generators)",
        COLUMNS,
        (_row(name, p) for name, p in summary["policies"].items()),
        caption="".join(part(summary) for part in _CAPTION),
    )


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


def _errors(summary: dict[str, Any]) -> str:
    text = (
        f"makespan error median {summary['median_makespan_err']:.1%}, worst "
        f"{summary['worst_makespan_err']:.1%}; tail error median {summary['median_tail_err']:.1%}; "
        f"ranking match: {summary['ranking_match']} ({_resolved_caption(summary)}); "
        f"teacher-forced step time error {summary['step_time_err']:.1%}"
    )
    if summary.get("median_noise_floor_makespan_err") is not None:
        text += (
            f"; noise floor (a perfect simulator, live runs as noisy as its draws): makespan "
            f"{summary['median_noise_floor_makespan_err']:.1%} (worst configuration "
            f"{summary['worst_noise_floor_makespan_err']:.1%}), tail "
            f"{summary['median_noise_floor_tail_err']:.1%}"
        )
    return text


def _draws(summary: dict[str, Any]) -> str:
    text = ""
    if summary.get("cost_factor_pools"):
        text += (
            f". Sim = median of {DRAWS} replays, each at the generators' cost factors of one "
            f"live rollout drawn from the other seeds' of the same setting; drawn around the "
            f"table's level instead: makespan error median "
            f"{summary['median_table_makespan_err']:.1%}, tail "
            f"{summary['median_table_tail_err']:.1%}; every instance at the table's price: "
            f"{summary['median_uniform_makespan_err']:.1%}, tail "
            f"{summary['median_uniform_tail_err']:.1%}"
        )
    text += (
        f". Seed by seed: makespan error median {summary['median_per_seed_makespan_err']:.1%}"
        f", tail {summary['median_per_seed_tail_err']:.1%}"
    )
    by_config = summary.get("config_pool")
    if by_config:
        text += (
            f". Speeds drawn per configuration instead (the other seeds' runs of the same "
            f"configuration): makespan error median {by_config['median_makespan_err']:.1%}, "
            f"worst {by_config['worst_makespan_err']:.1%} ({by_config['worst_config']}), tail "
            f"{by_config['median_tail_err']:.1%}, ranking match {by_config['ranking_match']}"
        )
    return text


def _tables(summary: dict[str, Any]) -> str:
    text = ""
    fixed = summary.get("fixed_table")
    if fixed:
        text += (
            f". Table: {summary['cost_table_info'].get('passes')} profile passes between the "
            f"live blocks; the cached table instead: makespan error median "
            f"{fixed['median_makespan_err']:.1%}"
        )
        if fixed["step_time_err"] is not None:
            text += f", step time error {fixed['step_time_err']:.1%}"
    live = summary.get("live_step_time") or {}
    spread = live.get("per_run_predicted_over_measured")
    if spread:  # the same engine and table, generator by generator, rollout by rollout
        text += (
            f"; table / live step time per generator and rollout {min(spread):.2f}-"
            f"{max(spread):.2f} (median {statistics.median(spread):.2f})"
        )
    if live.get("cpu_over_wall"):
        text += f"; live engine CPU / wall {live['cpu_over_wall']:.2f}"
    return text


def _diagnostics(summary: dict[str, Any]) -> str:
    text = ""
    if summary.get("median_norm_makespan_err") is not None:
        text += (
            f". Diagnostic, each instance at its own live speed (from its step log): makespan"
            f" error median {summary['median_norm_makespan_err']:.1%}, tail "
            f"{summary['median_norm_tail_err']:.1%}, ranking match "
            f"{summary.get('norm_ranking_match')}"
        )
        if summary["num_resolved_pairs"]:
            text += (
                f" ({summary.get('norm_resolved_pairs_agree')} of "
                f"{summary['num_resolved_pairs']} resolved pairs agree)"
            )
    if summary.get("median_paced_makespan_err") is not None:
        text += (
            f"; at its live speed window by window ({PACE_WINDOW_S:g} s): makespan "
            f"{summary['median_paced_makespan_err']:.1%}, tail "
            f"{summary['median_paced_tail_err']:.1%}"
        )
    return text


_CAPTION = (_errors, _draws, _tables, _diagnostics)  # the caption's parts, in order
