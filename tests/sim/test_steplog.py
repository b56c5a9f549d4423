"""Live step logs: written by the generator's StepLog, read back, and what the simulator
takes from them (overheads outside engine steps, teacher-forced step time)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.generator.engine import StepResult
from actors.generator.step_log import COLUMNS, StepLog, read_step_logs
from pipeline.sim import steplog
from pipeline.sim.costmodel import CostModel

ROWS = [
    {"shape": "s", "kind": "decode", "B": b, "g": 0, "ctx": c, "ms": ms}
    for b, c, ms in ((1, 32, 2.0), (4, 32, 4.0), (1, 1056, 3.0), (4, 1056, 6.0))
] + [{"shape": "s", "kind": "prefill", "B": 1, "tokens": 100, "ms": 10.0}]
COST = CostModel(ROWS, "s")
MAX_COST = CostModel(ROWS, "s", context="max")  # a row's ctx: the batch's longest context


def step(
    t: float,
    dur: float,
    rows: int = 4,
    ctx: int = 40,
    prefill: int = 0,
    ended: int = 0,
    idle: float = 0.0,
    max_ctx: int | None = None,
    drafts: int = 0,
    max_draft: int = 0,
) -> dict[str, float]:
    longest = ctx if max_ctx is None else max_ctx
    values = (
        *(t - 0.0001, t, t + dur, rows, rows * ctx, prefill, drafts, ended, 1, idle, dur),
        *(longest, max_draft),
    )
    return dict(zip(COLUMNS, values, strict=True))


def test_step_log_round_trips_per_rollout_and_instance(tmp_path: Path) -> None:
    log = StepLog(tmp_path, 1)
    result = StepResult((), (), 3, 16, 6, 90, 2, 40, 4)
    log.add(1.0, 1.1, 1.2, 0.09, result, 0.0)
    log.add(1.3, 1.3, 1.5, 0.2, result, 0.0)
    log.flush("r1")
    log.add(2.0, 2.0, 2.5, 0.5, result, 0.25)
    log.flush("r2")
    logs = read_step_logs(tmp_path)
    assert sorted(logs) == ["r1", "r2"] and list(logs["r1"]) == [1]
    first = logs["r1"][1][0]
    assert (first["start_s"], first["num_decode_rows"], first["num_prefill_requests"]) == (
        1.1,
        3,
        2,
    )
    assert len(logs["r1"][1]) == 2 and logs["r2"][1][0]["idle_s"] == 0.25 and not log.rows
    assert (first["cpu_s"], first["num_decode_max_context"]) == (0.09, 40)
    assert (first["num_draft_tokens"], first["num_draft_max"]) == (6, 4)


def test_a_step_log_from_before_the_last_columns_still_reads(tmp_path: Path) -> None:
    old = [1.0, 1.1, 1.2, 3, 90, 16, 0, 0, 2, 0.0]  # no cpu_s, no longest context
    (tmp_path / "steps-gen0.jsonl").write_text(
        json.dumps({"rollout_id": "r", "instance": 0, "steps": [old]}) + "\n"
    )
    (row,) = read_step_logs(tmp_path)["r"][0]
    assert row["num_decode_context_tokens"] == 90 and "num_decode_max_context" not in row
    assert steplog.teacher_forced([[row]], MAX_COST)["num_steps"] == 1  # priced by the mean


def test_overheads_are_the_median_gaps_per_step_and_per_reported_chunk() -> None:
    steps, t = [], 0.0
    for i in range(40):  # 5 ms steps, 0.5 ms apart; after a step that ends 2 chunks, 2.5 ms
        ended = 2 if i % 4 == 3 else 0
        steps.append(step(t, 0.005, ended=ended))
        t += 0.005 + (0.0025 if ended else 0.0005)
    steps.append(step(t + 1.0, 0.005, idle=1.0))  # an idle second (no work): not overhead
    out = steplog.overheads([steps])
    assert out["step_overhead_s"] == pytest.approx(0.0005)
    assert out["step_overhead_median_s"] == pytest.approx(0.0005)
    assert out["report_s"] == pytest.approx(0.001)  # (2.5 - 0.5) ms over 2 chunks


def test_teacher_forced_prices_each_logged_step_by_kind() -> None:
    decode = step(0.0, 0.004, rows=4, ctx=32)  # the table says 4 ms: exact
    prefill = step(1.0, 0.020, rows=0, prefill=100, idle=0.9)  # the table says 10 ms: half
    out = steplog.teacher_forced([[decode, prefill]], COST)
    assert out["num_steps"] == 2
    assert out["by_kind"]["decode"]["predicted_over_measured"] == pytest.approx(1.0)
    assert out["by_kind"]["prefill"]["predicted_over_measured"] == pytest.approx(0.5)
    assert out["step_time_err"] == pytest.approx(10 / 24)
    split = steplog.time_split([decode, prefill])
    assert split["engine_s"] == pytest.approx(0.024)
    assert split["idle_s"] == pytest.approx(0.9)
    assert split["between_s"] == pytest.approx(split["span_s"] - 0.024 - 0.9)


def test_a_table_keyed_by_the_longest_context_prices_a_step_by_its_longest_row() -> None:
    """The built-in engine pads attention to the batch's longest row: 4 rows of mean
    context 32 with one at 1,056 cost what 4 rows at 1,056 cost (6 ms), by a "max" table;
    a "mean" table prices the same step at the mean (4 ms)."""
    mixed = step(0.0, 0.006, rows=4, ctx=32, max_ctx=1056)
    by_max = steplog.teacher_forced([[mixed]], MAX_COST)
    by_mean = steplog.teacher_forced([[mixed]], COST)
    assert by_max["predicted_over_measured"] == pytest.approx(1.0, rel=0.03)
    assert by_mean["predicted_over_measured"] == pytest.approx(4 / 6, rel=0.03)
    assert MAX_COST.batch_context([32, 1056, 40]) == 1056
    assert COST.batch_context([32, 1056, 40]) == pytest.approx(376)


DRAFT_ROWS = [
    {"shape": "s", "kind": "decode", "B": b, "g": g, "ctx": c, "ms": ms * (1 + g / 4)}
    for b, c, ms in ((1, 32, 2.0), (4, 32, 4.0), (1, 1056, 3.0), (4, 1056, 6.0))
    for g in (0, 4)
]


def test_a_max_table_prices_drafts_by_the_largest_rows_draft() -> None:
    """The built-in engine pads every row's verify tokens to the longest draft too: 4 rows,
    one drafting 4 tokens and three none, cost what 4 rows drafting 4 cost (8 ms at
    context 32), by a "max" table; a "mean" table prices them at 1 token each (5 ms)."""
    by_max, by_mean = (CostModel(DRAFT_ROWS, "s", context=c) for c in ("max", "mean"))
    uneven = step(0.0, 0.008, rows=4, ctx=32, drafts=4, max_draft=4)
    assert steplog.teacher_forced([[uneven]], by_max)["predicted_over_measured"] == (
        pytest.approx(1.0, rel=0.03)
    )
    assert steplog.teacher_forced([[uneven]], by_mean)["predicted_over_measured"] == (
        pytest.approx(5 / 8, rel=0.03)
    )
    assert by_max.batch_draft([4, 0, 0, 0]) == 4 and by_mean.batch_draft([4, 0, 0, 0]) == 1
    assert by_max.batch_draft([]) == 0.0
    # a log from before the column prices drafts by their mean
    old = {k: v for k, v in uneven.items() if k != "num_draft_max"}
    assert steplog.teacher_forced([[old]], by_max)["predicted_over_measured"] == (
        pytest.approx(5 / 8, rel=0.03)
    )


def test_teacher_forced_reports_each_generator_run_and_cpu_over_wall() -> None:
    """Two generators' runs of the same steps, one 1.5x slower (a shared core): the spread
    per run says so, and the CPU-time column gives CPU over wall."""
    fast = [step(0.0, 0.004, rows=4, ctx=32)]  # the table: 4 ms
    slow = [step(0.0, 0.006, rows=4, ctx=32)]
    slow[0]["cpu_s"] = 0.003  # half of its wall time on a core
    out = steplog.teacher_forced([fast, slow], COST)
    assert out["per_run_predicted_over_measured"] == pytest.approx([4 / 6, 1.0])
    assert out["cpu_over_wall"] == pytest.approx((0.004 + 0.003) / 0.010)
