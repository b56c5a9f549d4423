"""Timeline plot of rollouts: one PNG, one panel per policy, shared time axis.

Each panel has one horizontal lane per generator instance. Inside a lane every chunk is a bar
from start_s to end_s; concurrent chunks (continuous batching) are stacked in sub-rows by a
greedy interval packing, so a lane's filled height shows the batch occupancy over time and
its gaps show idle time. Bars are coloured by group (``color_by="group"``) or by the
request's output length (``color_by="length"``, long = yellow). A solid line marks the
makespan and a dashed line the tail start (when 90% of requests had finished).

matplotlib is imported inside the function and drawn on an Agg canvas, so importing this
module is cheap and no global backend is set. matplotlib is the ``plot`` extra: `can_plot()`
says whether it is installed, `PLOT_HINT` how to get it, and `plot_timeline` without it
raises ``MissingExtraError``.
"""

from __future__ import annotations

import heapq
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from actors.extras import install_hint, require
from pipeline.records.metrics import tail_window
from transport.messages import ChunkRecord, RolloutRecord

PLOT_HINT = "PNG plots need matplotlib: " + install_hint("plot")


def can_plot() -> bool:
    """Whether matplotlib (the ``plot`` extra) is installed, so the PNGs can be drawn."""
    return importlib.util.find_spec("matplotlib") is not None


def plot_timeline(
    records: Mapping[str, RolloutRecord], path: str | Path, *, color_by: str = "group"
) -> Path:
    """Draw every record's busy timeline into one PNG at `path`; returns the path."""
    if not records:
        raise ValueError("plot_timeline needs at least one record")
    if color_by not in ("group", "length"):
        raise ValueError(f"color_by must be 'group' or 'length', got {color_by!r}")
    require("matplotlib", extra="plot", feature="plot_timeline")
    from matplotlib.figure import Figure

    lanes = sum(max(r.num_instances, 1) for r in records.values())
    fig = Figure(figsize=(11, 1.2 + 0.9 * lanes + 0.5 * len(records)), layout="constrained")
    axes = fig.subplots(len(records), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (name, record) in zip(axes, records.items(), strict=True):
        _draw_panel(ax, name, record, color_by)
    axes[-1].set_xlabel("seconds since rollout start")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    return out


def maybe_plot_timeline(
    records: Mapping[str, RolloutRecord], path: str | Path, *, color_by: str = "group"
) -> Path | None:
    """`plot_timeline` when matplotlib is installed, else None (say `PLOT_HINT` then)."""
    return plot_timeline(records, path, color_by=color_by) if can_plot() else None


def drawn(png: Path | None) -> str:
    """How a report line names a PNG that `maybe_plot_timeline` may not have drawn."""
    return str(png) if png is not None else f"no PNG ({PLOT_HINT})"


def _draw_panel(ax: Any, name: str, record: RolloutRecord, color_by: str) -> None:
    from matplotlib import colormaps

    colour = _colour_fn(record, color_by, colormaps)
    for instance in range(record.num_instances):
        chunks = [c for c in record.chunks if c.instance == instance]
        slots = pack_slots(chunks)
        height = 0.8 / max(max(slots, default=0) + 1, 1)
        for chunk, slot in zip(chunks, slots, strict=True):
            y = instance - 0.4 + slot * height
            width = max(chunk.end_s - chunk.start_s, 1e-9)
            ax.broken_barh([(chunk.start_s, width)], (y, height), color=colour(chunk), lw=0)
    tail_start, tail = tail_window([r.finish_s for r in record.requests])
    ax.axvline(record.makespan_s, color="black", lw=1.2, label="makespan")
    ax.axvline(tail_start, color="red", lw=1.2, ls="--", label="tail start (90% finished)")
    ax.set_yticks(range(record.num_instances))
    ax.set_yticklabels([f"gen {i}" for i in range(record.num_instances)])
    ax.set_ylim(-0.6, record.num_instances - 0.4)
    ax.invert_yaxis()
    ax.set_title(
        f"{name}: makespan {record.makespan_s:.2f} s, tail {tail:.2f} s", loc="left", fontsize=10
    )
    ax.legend(loc="upper right", fontsize=8)


def _colour_fn(record: RolloutRecord, color_by: str, colormaps: Any) -> Any:
    if color_by == "group":
        groups = sorted({c.group_id for c in record.chunks})
        index = {g: i for i, g in enumerate(groups)}
        cmap = colormaps["tab20"]
        return lambda c: cmap(index[c.group_id] % 20)
    lengths = {r.request_id: r.output_len for r in record.requests}
    longest = max(lengths.values(), default=1) or 1
    cmap = colormaps["viridis"]
    return lambda c: cmap(lengths.get(c.request_id, 0) / longest)


def pack_slots(chunks: Sequence[ChunkRecord]) -> list[int]:
    """Sub-row per chunk such that chunks in one sub-row never overlap (lowest free row)."""
    order = sorted(range(len(chunks)), key=lambda i: (chunks[i].start_s, chunks[i].end_s))
    slots = [0] * len(chunks)
    busy: list[tuple[float, int]] = []  # (end_s, slot) of chunks still running
    free: list[int] = []
    for i in order:
        while busy and busy[0][0] <= chunks[i].start_s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        slot = heapq.heappop(free) if free else len(busy) + len(free)
        slots[i] = slot
        heapq.heappush(busy, (chunks[i].end_s, slot))
    return slots
