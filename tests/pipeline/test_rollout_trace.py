"""Rollout traces: round trip through a file, and clear errors for bad files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.records.trace import TRACE_VERSION, trace_dict
from pipeline.rollout import (
    compute_metrics,
    load_trace,
    save_trace,
)
from transport.codec import decode, encode
from transport.messages import (
    ChunkRecord,
    InstanceCounters,
    RequestRecord,
    RolloutFinished,
    RolloutRecord,
    SpecStats,
)


def _chunk(rid: str, instance: int, seq: int, start: float, end: float) -> ChunkRecord:
    return ChunkRecord(
        request_id=rid,
        group_id=rid.split("-")[0],
        instance=instance,
        chunk_seq=seq,
        dispatched_s=start - 0.25,
        start_s=start,
        end_s=end,
        num_new_tokens=16,
        prompt_len=9,
        generated_before=16 * seq,
        num_reprefilled_tokens=9 if seq else 0,
        finish_reason="chunk" if seq < 1 else "length",
        # speculation counters on some chunks (metrics read them: mean acceptance length)
        spec=SpecStats(num_steps=10, num_tokens=16, num_draft_tokens=9, num_accepted_tokens=6)
        if instance
        else SpecStats(),
    )


def _request(rid: str, finish: float, probe: bool) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        group_id=rid.split("-")[0],
        prompt_id="prompt-" + rid.split("-")[0],
        is_probe=probe,
        prompt_len=9,
        output_len=32,
        arrival_s=0.0,
        finish_s=finish,
        finish_reason="length",
    )


RECORD = RolloutRecord(
    policy="context_aware",
    num_instances=2,
    chunks=(
        _chunk("g0-0", 0, 0, 0.25, 1.0),
        _chunk("g0-1", 1, 0, 0.5, 1.5),
        _chunk("g0-0", 1, 1, 1.75, 2.5),
        _chunk("g0-1", 1, 1, 1.6, 3.0),
    ),
    requests=(_request("g0-0", 2.5, True), _request("g0-1", 3.0, False)),
    instances=(
        InstanceCounters(
            instance=0, num_preemptions=1, num_recomputed_tokens=12, num_reprefilled_tokens=0
        ),
        InstanceCounters(
            instance=1,
            num_preemptions=0,
            num_recomputed_tokens=0,
            num_reprefilled_tokens=9,
            num_draft_tokens=5,
            num_accepted_tokens=3,
        ),
    ),
    makespan_s=3.0,
)


def _key(c: ChunkRecord) -> tuple[str, int]:
    return c.request_id, c.chunk_seq


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    loaded = load_trace(save_trace(RECORD, tmp_path / "t" / "trace.json"))
    assert loaded.requests == RECORD.requests and loaded.instances == RECORD.instances
    assert (loaded.policy, loaded.num_instances, loaded.makespan_s) == ("context_aware", 2, 3.0)
    assert sorted(loaded.chunks, key=_key) == sorted(RECORD.chunks, key=_key)
    assert [c.dispatched_s for c in loaded.chunks] == sorted(c.dispatched_s for c in RECORD.chunks)
    assert compute_metrics(loaded) == compute_metrics(RECORD)


def test_a_trace_without_speculation_counters_loads_with_zeros(tmp_path: Path) -> None:
    data = trace_dict(RECORD)  # as written before chunks carried ``spec``
    for req in data["requests"]:
        for chunk in req["chunks"]:
            del chunk["spec"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    loaded = load_trace(path)
    assert all(c.spec == SpecStats() for c in loaded.chunks)
    assert compute_metrics(loaded)["num_draft_tokens"] == 0
    assert compute_metrics(RECORD)["mean_accept_len"] == pytest.approx(1.6)


def test_trace_nests_chunks_under_their_request(tmp_path: Path) -> None:
    data = json.loads(save_trace(RECORD, tmp_path / "trace.json").read_text())
    assert data["version"] == TRACE_VERSION == 2
    first = data["requests"][0]
    assert (first["group_id"], first["prompt_len"], first["output_len"]) == ("g0", 9, 32)
    assert [(c["instance"], c["start_s"], c["end_s"]) for c in first["chunks"]] == [
        (0, 0.25, 1.0),
        (1, 1.75, 2.5),
    ]


def test_record_round_trips_through_the_codec_as_the_scheduler_sends_it() -> None:
    msg = RolloutFinished(rollout_id="r0", samples=(), record=RECORD)
    assert decode(encode(msg)) == msg


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()
BAD = [
    ("version", _set("version", 1), "unsupported trace version"),
    ("no version", _set("version", _DELETE), "unsupported trace version"),
    ("missing", _set("requests.0.output_len", _DELETE), "requests[0].output_len: missing"),
    ("type", _set("requests.1.prompt_len", "9"), "requests[1].prompt_len: expected int"),
    ("bool", _set("requests.1.output_len", True), "requests[1].output_len: expected int"),
    (
        "negative",
        _set("requests.0.chunks.1.num_new_tokens", -1),
        "requests[0].chunks[1].num_new_tokens: must be finite",
    ),
    ("order", _set("requests.0.chunks.0.end_s", 0.1), "requests[0].chunks[0]: need dispatched_s"),
    ("instance", _set("requests.1.chunks.0.instance", 2), "requests[1].chunks[0].instance"),
    ("reason", _set("requests.0.finish_reason", "done"), "unknown finish reason 'done'"),
    ("dup request", _set("requests.1.request_id", "g0-0"), "requests[1].request_id: duplicate"),
    ("dup chunk", _set("requests.0.chunks.1.chunk_seq", 0), "requests[0].chunks[1].chunk_seq"),
    ("chunks", _set("requests.0.chunks", {}), "requests[0].chunks: expected a list"),
    ("instances", _set("num_instances", 0), "num_instances must be >= 1"),
    (
        "counters",
        _set("instances.0.num_preemptions", 1.5),
        "instances[0].num_preemptions: expected int",
    ),
    ("nan", _set("makespan_s", float("nan")), "makespan_s: must be finite"),
    (
        "spec",
        _set("requests.1.chunks.0.spec", {"num_steps": -1}),
        "requests[1].chunks[0].spec.num_steps: must be finite and >= 0",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_trace_raises_value_error_naming_the_problem(
    tmp_path: Path, name: str, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    data = trace_dict(RECORD)
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as err:
        load_trace(path)
    assert message in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "null"])
def test_not_a_trace_raises_value_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"not valid JSON|must be a JSON object"):
        load_trace(path)


def test_save_rejects_chunks_of_unknown_requests(tmp_path: Path) -> None:
    orphan = RolloutRecord(
        policy="p",
        num_instances=1,
        chunks=(_chunk("zz-0", 0, 0, 1, 2),),
        requests=(),
        instances=(),
        makespan_s=2.0,
    )
    with pytest.raises(ValueError, match="unknown requests"):
        save_trace(orphan, tmp_path / "t.json")
