"""Rollout metrics on hand-built records, and the timeline plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.records.metrics import merge_intervals, tail_window
from pipeline.rollout import (
    compute_metrics,
    plot_timeline,
    save_metrics,
)
from transport.messages import (
    ChunkRecord,
    InstanceCounters,
    RequestRecord,
    RolloutRecord,
)


def chunk(rid: str, instance: int, seq: int, start: float, end: float, **kw: object) -> ChunkRecord:
    fields: dict[str, object] = {
        "request_id": rid,
        "group_id": rid[0],
        "instance": instance,
        "chunk_seq": seq,
        "dispatched_s": start,
        "start_s": start,
        "end_s": end,
        "num_new_tokens": 10,
        "prompt_len": 4,
        "generated_before": 10 * seq,
        "num_reprefilled_tokens": 0,
        "finish_reason": "chunk",
    }
    return ChunkRecord(**{**fields, **kw})  # type: ignore[arg-type]


def request(rid: str, out: int, finish: float, arrival: float = 0.0) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        group_id=rid[0],
        prompt_id=rid[0],
        is_probe=False,
        prompt_len=4,
        output_len=out,
        arrival_s=arrival,
        finish_s=finish,
        finish_reason="stop",
    )


def record(
    chunks: tuple[ChunkRecord, ...],
    requests: tuple[RequestRecord, ...],
    makespan: float = 10.0,
    instances: tuple[InstanceCounters, ...] = (),
) -> RolloutRecord:
    return RolloutRecord(
        policy="p",
        num_instances=2,
        chunks=chunks,
        requests=requests,
        instances=instances,
        makespan_s=makespan,
    )


# Instance 0 runs overlapping chunks [0, 4] and [2, 6], then [8, 10]: busy 8 of 10 s.
# Instance 1 runs [1, 3]: busy 2 of 10 s. Request "a" moves 0 -> 1 -> 1 -> 0 (2 moves).
CHUNKS = (
    chunk("a1", 0, 0, 0.0, 4.0),
    chunk("a1", 0, 3, 8.0, 10.0, dispatched_s=7.5, num_reprefilled_tokens=34),
    chunk("a1", 1, 1, 4.0, 4.0),  # empty interval: counts for moves, not for busy time
    chunk("b1", 0, 0, 2.0, 6.0, dispatched_s=1.0),
    chunk("a1", 1, 2, 1.0, 3.0, num_reprefilled_tokens=14),
)
REQUESTS = (request("a1", 800, 10.0), request("b1", 200, 6.0, arrival=0.5))


def test_makespan_throughput_and_counts() -> None:
    m = compute_metrics(record(CHUNKS, REQUESTS))
    assert m["makespan_s"] == 10.0 and m["output_tokens"] == 1000
    assert m["throughput_tok_s"] == 100.0
    assert m["num_requests"] == 2 and m["num_chunks"] == 5
    assert m["num_reprefilled_tokens"] == 48


def test_idle_fraction_counts_overlapping_chunks_once() -> None:
    m = compute_metrics(record(CHUNKS, REQUESTS))
    assert m["busy_timeline"] == [[[0.0, 6.0], [8.0, 10.0]], [[1.0, 3.0]]]
    assert m["idle_fraction_per_instance"] == pytest.approx([0.2, 0.8])
    assert m["idle_fraction"] == pytest.approx(0.5)


def test_instance_without_chunks_is_fully_idle() -> None:
    m = compute_metrics(record((chunk("a1", 0, 0, 0.0, 10.0),), (request("a1", 10, 10.0),)))
    assert m["idle_fraction_per_instance"] == [0.0, 1.0] and m["idle_fraction"] == 0.5


def test_chunks_moved_follows_chunk_seq_not_list_order() -> None:
    assert compute_metrics(record(CHUNKS, REQUESTS))["chunks_moved"] == 2


def test_tail_is_time_from_ninety_percent_finished_to_last() -> None:
    finishes = [float(t) for t in range(20, 0, -1)]  # 1..20, unsorted
    assert tail_window(finishes) == (18.0, 2.0)
    assert tail_window([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 30.0]) == (9.0, 21.0)
    assert tail_window([5.0]) == (5.0, 0.0)
    reqs = tuple(request(f"r{i}", 1, float(i)) for i in range(1, 11))
    m = compute_metrics(record((), reqs))
    assert m["tail_start_s"] == 9.0 and m["tail_s"] == 1.0


def test_efficiency_against_the_lower_bound() -> None:
    # work term 1000 tok * 0.01 s / 2 instances = 5 s; longest request 800 * 0.01 = 8 s
    m = compute_metrics(record(CHUNKS, REQUESTS), per_token_s=0.01)
    assert m["lower_bound_s"] == pytest.approx(8.0) and m["efficiency"] == pytest.approx(0.8)
    assert m["per_token_source"] == "measured"
    even = (request("a1", 500, 10.0), request("b1", 500, 6.0))
    m = compute_metrics(record(CHUNKS, even), per_token_s=0.016)
    assert m["lower_bound_s"] == pytest.approx(8.0)  # the work term: 1000 * 0.016 / 2
    assert m["efficiency"] == pytest.approx(0.8)


def test_estimated_per_token_cost_is_busy_time_per_token() -> None:
    m = compute_metrics(record(CHUNKS, REQUESTS))
    assert m["per_token_source"] == "estimated"
    assert m["per_token_s"] == pytest.approx(10.0 / 1000)  # busy 8 + 2 instance-seconds
    assert m["lower_bound_s"] == pytest.approx(8.0)


def test_queueing_delays_and_counters() -> None:
    counters = (
        InstanceCounters(
            instance=0,
            num_preemptions=3,
            num_recomputed_tokens=90,
            num_reprefilled_tokens=5,
            num_draft_tokens=10,
            num_accepted_tokens=4,
        ),
        InstanceCounters(
            instance=1, num_preemptions=1, num_recomputed_tokens=10, num_reprefilled_tokens=0
        ),
    )
    m = compute_metrics(record(CHUNKS, REQUESTS, instances=counters))
    q = m["queueing_delay_s"]
    assert q["chunk_mean"] == pytest.approx((0.5 + 1.0) / 5)
    assert q["first_chunk_mean"] == pytest.approx((0.0 + 1.5) / 2)  # b1: starts 2.0, arrived 0.5
    assert m["num_preemptions"] == 4 and m["num_recomputed_tokens"] == 100
    assert m["engine_num_reprefilled_tokens"] == 5


def test_merge_intervals() -> None:
    assert merge_intervals([(3, 4), (0, 1), (1, 2), (5, 5), (0.5, 1.5)]) == [(0, 2), (3, 4)]


def test_save_metrics_writes_json(tmp_path: Path) -> None:
    m = compute_metrics(record(CHUNKS, REQUESTS), per_token_s=0.01)
    path = save_metrics(m, tmp_path / "out" / "metrics.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(m))


def test_plot_writes_a_png_with_one_panel_per_policy(tmp_path: Path) -> None:
    records = {"baseline": record(CHUNKS, REQUESTS), "divided": record(CHUNKS[:2], REQUESTS)}
    path = plot_timeline(records, tmp_path / "timeline.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000
    by_length = plot_timeline(records, tmp_path / "by_length.png", color_by="length")
    assert by_length.stat().st_size > 5_000
    with pytest.raises(ValueError):
        plot_timeline({}, tmp_path / "empty.png")


def test_plot_stacks_concurrent_chunks_in_separate_rows() -> None:
    from pipeline.records.plot import pack_slots

    chunks = [
        chunk("a1", 0, 0, 0, 4),
        chunk("b1", 0, 0, 2, 6),
        chunk("c1", 0, 0, 4, 5),
        chunk("d1", 0, 0, 3, 7),
    ]
    assert pack_slots(chunks) == [0, 1, 0, 2]


def test_estimate_error_against_each_groups_true_longest() -> None:
    import dataclasses

    reqs = (
        request("a0", 100, 1.0),  # group a's longest: 100
        dataclasses.replace(request("a1", 50, 2.0), estimate=150),  # +50%
        dataclasses.replace(request("b1", 200, 3.0), estimate=100),  # -50%
        dataclasses.replace(request("b2", 40, 3.0), estimate=200),  # exact
    )
    m = compute_metrics(record((), reqs))
    assert m["num_estimates"] == 3
    assert m["estimate_error"] == pytest.approx(1 / 3)
    assert m["estimate_bias"] == pytest.approx(0.0)
    none = compute_metrics(record((), reqs[:1]))
    assert none["estimate_error"] is None and none["num_estimates"] == 0
