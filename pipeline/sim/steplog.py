"""What live generators' step logs say about the simulator's inputs (``SEER_STEP_LOG``).

From the steps a generator logged in one rollout (``actors.generator.step_log``):
- ``overheads``: the generator's time outside engine calls while it has work (a gap from
  one engine call's end to the next one's start, less the time the loop waited with
  nothing queued). Per step: the mean gap after steps that ended no chunk (the
  worker-thread hand-off and back, the loop, admitting queued chunks: the mean, since a
  makespan adds them up); per ended chunk: the median extra gap after steps that ended
  chunks over the plain gaps' median, per chunk ended (reporting each result).
- ``teacher_forced``: every logged step priced by the cost table (its decoding rows, their
  mean cached context, draft tokens, prefill tokens) against its measured time: the total
  error, the per-step median, and the same split by kind of step (decode only, prefill
  only, both) -- the protocol's step-time check on steps from live runs, where both
  generators and the control plane share the cores; and per generator and rollout
  (``per_run_predicted_over_measured``: how evenly the live generators ran) and the engine
  calls' CPU time over their wall time (``cpu_over_wall``: below 1, a generator waited
  for a core inside its steps).
- ``time_split``: per generator, the rollout's span split into engine calls, time between
  calls while busy, and the rest.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.sim.costmodel import CostModel

__all__ = ["overheads", "predict", "price", "teacher_forced", "time_split"]

Step = dict[str, float]


def _pairs(steps: Sequence[Step]) -> Iterable[tuple[Step, Step]]:
    return itertools.pairwise(steps)


def overheads(runs: Iterable[Sequence[Step]]) -> dict[str, float]:
    """``runs``: each one generator's steps in one rollout, in order."""
    plain: list[float] = []
    after: list[tuple[float, float]] = []  # (gap, chunks ended)
    for steps in runs:
        for a, b in _pairs(steps):
            gap = b["start_s"] - a["end_s"] - b["idle_s"]
            if a["num_finished"]:
                after.append((gap, a["num_finished"]))
            else:
                plain.append(gap)
    step = statistics.fmean(plain) if plain else 0.0
    per_chunk = 0.0
    if after and plain:
        extra = statistics.median(g for g, _ in after) - statistics.median(plain)
        per_chunk = max(extra, 0.0) / statistics.median(n for _, n in after)
    return {
        "step_overhead_s": max(step, 0.0),
        "step_overhead_median_s": max(statistics.median(plain), 0.0) if plain else 0.0,
        "report_s": per_chunk,
        "num_gaps": len(plain) + len(after),
    }


def price(
    cost: CostModel,
    rows: int,
    context_tokens: float,
    max_context: float,
    draft_tokens: float,
    prefill_tokens: int,
    prefill_requests: int,
    max_draft: float = 0.0,
) -> float:
    """One engine step's price by the table: its prefill, then its decode rows at the
    context and draft length the table keys (the rows' mean, or the longest row's for a
    "max" table; the mean when the longest is unknown: a step log from before that
    column)."""
    guess = cost.prefill_s(prefill_tokens, prefill_requests)
    if rows:
        ctx, g = context_tokens / rows, draft_tokens / rows
        if cost.context == "max" and max_context:
            ctx = max_context
        if cost.context == "max" and max_draft:
            g = max_draft
        guess += cost.decode_s(rows, ctx, g)
    return guess


def predict(step: Step, cost: CostModel) -> float:
    """A logged step's price by the table (``price`` on its columns)."""
    return price(
        cost,
        int(step["num_decode_rows"]),
        step["num_decode_context_tokens"],
        step.get("num_decode_max_context", 0),
        step["num_draft_tokens"],
        int(step["num_prefill_tokens"]),
        int(step["num_prefill_requests"]),
        step.get("num_draft_max", 0),
    )


def _kind(step: Step) -> str:
    if step["num_decode_rows"] and step["num_prefill_tokens"]:
        return "mixed"
    return "prefill" if step["num_prefill_tokens"] else "decode"


def teacher_forced(runs: Iterable[Sequence[Step]], cost: CostModel) -> dict[str, Any]:
    measured: dict[str, float] = {"decode": 0.0, "prefill": 0.0, "mixed": 0.0}
    predicted = dict.fromkeys(measured, 0.0)
    errors: list[float] = []
    per_run: list[float] = []  # predicted / measured, one generator in one rollout
    cpu = wall = 0.0
    for steps in runs:
        run_m = run_p = 0.0
        for s in steps:
            took = s["end_s"] - s["start_s"]
            if took <= 0 or not (s["num_decode_rows"] or s["num_prefill_tokens"]):
                continue
            guess = predict(s, cost)
            measured[_kind(s)] += took
            predicted[_kind(s)] += guess
            run_m, run_p = run_m + took, run_p + guess
            errors.append(abs(guess - took) / took)
            if "cpu_s" in s:
                cpu, wall = cpu + s["cpu_s"], wall + took
        if run_m > 0:
            per_run.append(run_p / run_m)
    total_m, total_p = sum(measured.values()), sum(predicted.values())
    return {
        # the spread between generators and rollouts: the same table, the same engine
        "per_run_predicted_over_measured": sorted(per_run),
        # CPU time of the engine calls over their wall time (1: never waiting for a core)
        "cpu_over_wall": cpu / wall if wall > 0 else None,
        "step_time_err": abs(total_p - total_m) / total_m if total_m else 0.0,
        "predicted_over_measured": total_p / total_m if total_m else 0.0,
        "per_step_median_err": statistics.median(errors) if errors else 0.0,
        "num_steps": len(errors),
        "by_kind": {
            k: {
                "measured_s": measured[k],
                "predicted_over_measured": predicted[k] / measured[k] if measured[k] else 0.0,
            }
            for k in measured
        },
    }


def time_split(steps: Sequence[Step]) -> dict[str, float]:
    """One generator in one rollout: span (first step's loop start to last step's end),
    engine (inside engine calls), idle (waiting with nothing queued), between (the rest:
    the loop's own time between engine calls)."""
    if not steps:
        return {"span_s": 0.0, "engine_s": 0.0, "between_s": 0.0, "idle_s": 0.0}
    engine = sum(s["end_s"] - s["start_s"] for s in steps)
    idle = sum(b["idle_s"] for b in steps[1:])
    span = steps[-1]["end_s"] - steps[0]["loop_s"]
    return {"span_s": span, "engine_s": engine, "between_s": span - engine - idle, "idle_s": idle}
