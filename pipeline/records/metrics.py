"""Metrics of one rollout, computed from its `RolloutRecord` alone (pure, no clocks).

Definitions (all times in seconds since the rollout started):
- ``makespan_s``: the recorded makespan; ``output_tokens``: sum of requests' output lengths;
  ``throughput_tok_s`` = output_tokens / makespan_s.
- ``tail_s``: the time from when 90% of requests have finished until the last one finishes:
  with finish times sorted ascending and n requests, ``tail_start_s`` is the k-th finish time,
  k = ceil(0.9 n), and tail_s = last finish - tail_start_s.
- ``busy_timeline``: per instance (list index = instance number), the union of its chunks'
  [start_s, end_s] intervals clipped to [0, makespan], merged and sorted. Overlapping chunks
  (continuous batching) count once. ``idle_fraction_per_instance`` = 1 - busy / makespan;
  ``idle_fraction`` is their mean over all `num_instances` (an instance with no chunks is idle).
- ``chunks_moved``: over each request's chunks in chunk_seq order, the number of consecutive
  pairs that ran on different instances.
- ``num_reprefilled_tokens``: sum over chunks (what the scheduler saw);
  ``engine_num_reprefilled_tokens``, ``num_preemptions``, ``num_recomputed_tokens``: sums of
  the engine-side instance counters.
- ``mean_accept_len``: tokens emitted per verify (decode) step, bonus token included (1.0
  without speculation) over ``num_spec_steps``; ``num_draft_tokens`` /
  ``num_accepted_tokens``: draft nodes offered and accepted, from the chunks;
  ``accept_rate`` = accepted / drafted.
- ``queueing_delay_s``: mean and p90 of chunk start_s - dispatched_s (``chunk_*``), and of a
  request's first chunk start_s - its arrival_s (``first_chunk_*``).
- ``estimate_error``: over the requests that carry the scheduler's estimate of their group's
  longest output at their first dispatch (``RequestRecord.estimate`` > 0: the ordered,
  non-probe requests of context-aware), the mean of |estimate - the group's true longest| /
  the group's true longest; ``estimate_bias`` the same mean signed (< 0: estimates short);
  both None without estimates; ``num_estimates`` how many requests carried one.
- ``lower_bound_s`` = max(output_tokens * per_token_s / num_instances,
  longest output_len * per_token_s); ``efficiency`` = lower_bound_s / makespan_s.
  ``per_token_s`` should be the measured per-token cost (the bench passes it). When it is None
  it is estimated as total busy instance-time (sum of the busy timelines) / output_tokens and
  ``per_token_source`` says "estimated": then the work term equals the mean busy time, so
  efficiency is about 1 - idle_fraction, and the longest-request term is optimistic (batching
  amortises the per-token cost), so prefer a measured value.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transport.messages import ChunkRecord, RolloutRecord

Interval = tuple[float, float]


def compute_metrics(record: RolloutRecord, *, per_token_s: float | None = None) -> dict[str, Any]:
    """Every metric in the module docstring, as a JSON-able dict."""
    makespan = record.makespan_s
    output_tokens = sum(r.output_len for r in record.requests)
    timeline = busy_timeline(record)
    busy = [sum(e - s for s, e in lane) for lane in timeline]
    idle = [1.0 - b / makespan if makespan > 0 else 0.0 for b in busy]
    tail_start, tail = tail_window([r.finish_s for r in record.requests])
    cost, source = _per_token(per_token_s, sum(busy), output_tokens)
    longest = max((r.output_len for r in record.requests), default=0)
    lower = max(output_tokens * cost / max(record.num_instances, 1), longest * cost)
    counters = record.instances
    return {
        "policy": record.policy,
        "num_instances": record.num_instances,
        "num_requests": len(record.requests),
        "num_chunks": len(record.chunks),
        "makespan_s": makespan,
        "output_tokens": output_tokens,
        "throughput_tok_s": output_tokens / makespan if makespan > 0 else 0.0,
        "tail_start_s": tail_start,
        "tail_s": tail,
        "idle_fraction": float(np.mean(idle)) if idle else 0.0,
        "idle_fraction_per_instance": idle,
        "busy_timeline": [[[s, e] for s, e in lane] for lane in timeline],
        "chunks_moved": chunks_moved(record.chunks),
        "num_reprefilled_tokens": sum(c.num_reprefilled_tokens for c in record.chunks),
        "engine_num_reprefilled_tokens": sum(c.num_reprefilled_tokens for c in counters),
        "num_preemptions": sum(c.num_preemptions for c in counters),
        "num_recomputed_tokens": sum(c.num_recomputed_tokens for c in counters),
        **speculation_metrics(record.chunks),
        **estimate_metrics(record),
        "queueing_delay_s": queueing_delays(record),
        "per_token_s": cost,
        "per_token_source": source,
        "lower_bound_s": lower,
        "efficiency": lower / makespan if makespan > 0 else 0.0,
    }


#: the scalar figures of `compute_metrics` an RL run's metrics row carries (timing,
#: balance, preemption and speculation; the queueing delays are a table of four)
ROLLOUT_FIGURES = (
    "makespan_s",
    "output_tokens",
    "throughput_tok_s",
    "tail_s",
    "idle_fraction",
    "num_chunks",
    "chunks_moved",
    "num_reprefilled_tokens",
    "num_preemptions",
    "num_recomputed_tokens",
    "num_spec_steps",
    "mean_accept_len",
    "num_draft_tokens",
    "num_accepted_tokens",
    "accept_rate",
    "queueing_delay_s",
)


def rollout_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """The `ROLLOUT_FIGURES` of a `compute_metrics` result (those it has)."""
    return {k: metrics[k] for k in ROLLOUT_FIGURES if k in metrics}


def speculation_metrics(chunks: Sequence[ChunkRecord]) -> dict[str, float]:
    """Mean acceptance length (tokens per verify step, bonus token included: 1.0 without
    speculation), draft nodes offered and accepted, and the acceptance rate."""
    steps = sum(c.spec.num_steps for c in chunks)
    drafted = sum(c.spec.num_draft_tokens for c in chunks)
    accepted = sum(c.spec.num_accepted_tokens for c in chunks)
    return {
        "num_spec_steps": steps,
        "mean_accept_len": sum(c.spec.num_tokens for c in chunks) / steps if steps else 0.0,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "accept_rate": accepted / drafted if drafted else 0.0,
    }


def estimate_metrics(record: RolloutRecord) -> dict[str, Any]:
    """How far the scheduler's group estimates were from the groups' true longest outputs
    (``estimate_error``, ``estimate_bias``, ``num_estimates``: see the module docstring)."""
    longest: dict[str, int] = defaultdict(int)
    for r in record.requests:
        longest[r.group_id] = max(longest[r.group_id], r.output_len)
    rel = [
        (r.estimate - longest[r.group_id]) / max(longest[r.group_id], 1)
        for r in record.requests
        if r.estimate > 0
    ]
    return {
        "estimate_error": float(np.mean(np.abs(rel))) if rel else None,
        "estimate_bias": float(np.mean(rel)) if rel else None,
        "num_estimates": len(rel),
    }


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted union of closed intervals; touching intervals merge; empty ones are dropped."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def busy_timeline(record: RolloutRecord) -> list[list[Interval]]:
    """Per instance (index = instance number), merged busy intervals within [0, makespan]."""
    lanes: list[list[Interval]] = [[] for _ in range(record.num_instances)]
    for c in record.chunks:
        if 0 <= c.instance < record.num_instances:
            span = (max(c.start_s, 0.0), min(c.end_s, record.makespan_s))
            lanes[c.instance].append(span)
    return [merge_intervals(lane) for lane in lanes]


def tail_window(finish_times: Sequence[float]) -> tuple[float, float]:
    """(time when 90% of requests have finished, time from then until the last finishes)."""
    if not finish_times:
        return 0.0, 0.0
    ordered = sorted(finish_times)
    k = -(-9 * len(ordered) // 10)  # ceil(0.9 n) without float rounding
    return ordered[k - 1], ordered[-1] - ordered[k - 1]


def chunks_moved(chunks: Iterable[ChunkRecord]) -> int:
    """Consecutive chunks (by chunk_seq) of the same request that ran on different instances."""
    by_request: dict[str, list[ChunkRecord]] = defaultdict(list)
    for c in chunks:
        by_request[c.request_id].append(c)
    moved = 0
    for seq in by_request.values():
        seq.sort(key=lambda c: c.chunk_seq)
        moved += sum(a.instance != b.instance for a, b in itertools.pairwise(seq))
    return moved


def queueing_delays(record: RolloutRecord) -> dict[str, float]:
    chunk_delays = [c.start_s - c.dispatched_s for c in record.chunks]
    first: dict[str, ChunkRecord] = {}
    for c in record.chunks:
        if c.request_id not in first or c.chunk_seq < first[c.request_id].chunk_seq:
            first[c.request_id] = c
    first_delays = [
        first[r.request_id].start_s - r.arrival_s for r in record.requests if r.request_id in first
    ]
    return {
        "chunk_mean": _mean(chunk_delays),
        "chunk_p90": _p90(chunk_delays),
        "first_chunk_mean": _mean(first_delays),
        "first_chunk_p90": _p90(first_delays),
    }


def save_metrics(metrics: dict[str, Any], path: str | Path) -> Path:
    """Write metrics as indented JSON (numpy scalars and tuples converted); returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(metrics, indent=2, default=_json_default) + "\n")
    return out


def _per_token(given: float | None, busy_total: float, tokens: int) -> tuple[float, str]:
    if given is not None:
        if given < 0:
            raise ValueError(f"per_token_s must be >= 0, got {given}")
        return given, "measured"
    return (busy_total / tokens if tokens else 0.0), "estimated"


def _mean(xs: Sequence[float]) -> float:
    return float(np.mean(xs)) if xs else 0.0


def _p90(xs: Sequence[float]) -> float:
    return float(np.percentile(xs, 90)) if xs else 0.0


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")
