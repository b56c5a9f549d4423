"""Live progress and the end-of-run report of `seer run` (rich console, PNG plots)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from actors.extras import require

COLUMNS = (
    ("iteration", "it", "{:d}"),
    ("reward_mean", "reward", "{:.3f}"),
    ("success_rate", "success", "{:.0%}"),
    ("rollout_s", "rollout s", "{:.2f}"),
    ("train_s", "train s", "{:.2f}"),
    ("throughput_tok_s", "tok/s", "{:.0f}"),
    ("tail_s", "tail s", "{:.2f}"),
    ("mean_accept_len", "accept", "{:.2f}"),
    ("estimate_error", "est err", "{:.2f}"),
    ("output_tokens", "tokens", "{:d}"),
    ("weight_version", "version", "{:d}"),
    ("train_logprob_gap_max", "lp gap", "{:.1e}"),
    ("eval_reward", "eval", "{:.3f}"),
)


class LiveReport:
    """Prints one line per iteration as it finishes; warm-start progress is a bar with the
    steps done, the last loss and an estimate of the time left."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.header_done = False
        self.warm_bar: Progress | None = None

    def __call__(self, row: dict[str, Any]) -> None:
        if "warm_start" in row:
            self.warm_start(row["warm_start"])
            return
        if not self.header_done:
            # one space between columns: the 13 columns fit in `seer run`'s 130-wide console
            self.console.print(" ".join(f"{title:>9}" for _, title, _ in COLUMNS))
            self.header_done = True
        cells = [
            fmt.format(row[key]) if row.get(key) is not None else "-" for key, _, fmt in COLUMNS
        ]
        self.console.print(" ".join(f"{c:>9}" for c in cells))

    def warm_start(self, info: dict[str, Any]) -> None:
        """One step of the warm start: ``step`` of ``steps`` done, with its ``loss``."""
        if self.warm_bar is None:
            self.warm_bar = Progress(
                TextColumn("[dim]warm start[/]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("steps, loss {task.fields[loss]:.3f}"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.warm_bar.add_task("warm start", total=info["steps"], loss=info["loss"])
            self.warm_bar.start()
        self.warm_bar.update(self.warm_bar.task_ids[0], completed=info["step"], loss=info["loss"])
        if info["step"] >= info["steps"]:
            self.warm_bar.stop()
            self.warm_bar = None


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """First, last, best and mean of each figure over the iterations' rows; a figure no row
    has is "-", and no rows at all is an empty table that says so."""
    table = Table(title=title, caption=None if rows else "no iterations ran")
    for label in ("", "first", "last", "best", "mean"):
        table.add_column(label, justify="right")
    for key, label in (
        ("reward_mean", "reward"),
        ("success_rate", "success"),
        ("rollout_s", "rollout s"),
        ("train_s", "train s"),
        ("throughput_tok_s", "tok/s"),
        ("tail_s", "tail s"),
        ("mean_accept_len", "accept len"),
    ):
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        if not values:
            table.add_row(label, "-", "-", "-", "-")
            continue
        table.add_row(
            label,
            f"{values[0]:.3g}",
            f"{values[-1]:.3g}",
            f"{max(values):.3g}",
            f"{sum(values) / len(values):.3g}",
        )
    return table


def plot_rewards(rows: list[dict[str, Any]], path: Path) -> Path:
    """Reward and time per iteration as a PNG at `path` (no rows: empty axes that say so)."""
    matplotlib = require("matplotlib", extra="plot", feature="plot_rewards")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    its = [r["iteration"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax1.plot(its, [r["reward_mean"] for r in rows], marker="o", label="mean reward")
    ax1.plot(its, [r["success_rate"] for r in rows], marker=".", label="success rate")
    evals = [(r["iteration"], r["eval_reward"]) for r in rows if "eval_reward" in r]
    if evals:
        before = [(its[0] - 1, r["eval_reward_before"]) for r in rows if "eval_reward_before" in r]
        points = before[:1] + evals
        ax1.plot(*zip(*points, strict=True), marker="s", label="held-out reward")
    ax1.set_xlabel("iteration")
    ax1.set_ylim(0, 1)
    ax1.legend()
    ax1.set_title("reward")
    ax2.plot(its, [r["rollout_s"] for r in rows], marker="o", label="rollout s")
    ax2.plot(its, [r["train_s"] for r in rows], marker=".", label="train s")
    ax2.set_xlabel("iteration")
    ax2.legend()
    ax2.set_title("time per iteration")
    if not rows:
        for ax in (ax1, ax2):
            ax.text(0.5, 0.5, "no iterations ran", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def load_rows(path: Path) -> list[dict[str, Any]]:
    """A run's `metrics.jsonl` rows (`FileNotFoundError` naming it if the run wrote none)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (the run finished no iteration)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
