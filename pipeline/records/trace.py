"""Rollout traces: a JSON file of what a rollout did (to replay), and its checked loader.

Format (``version`` = `TRACE_VERSION`)::

    {"version": 2, "policy": str, "num_instances": int, "makespan_s": float,
     "instances": [{"instance", "num_preemptions", "num_recomputed_tokens",
                    "num_reprefilled_tokens", "num_draft_tokens", "num_accepted_tokens"}, ...],
     "requests": [{"request_id", "group_id", "prompt_id", "is_probe", "prompt_len",
                   "output_len", "arrival_s", "finish_s", "finish_reason",
                   "chunks": [{"chunk_seq", "instance", "dispatched_s", "start_s", "end_s",
                               "num_new_tokens", "generated_before",
                               "num_reprefilled_tokens", "finish_reason",
                               "weight_version", "spec": {"num_steps", "num_tokens",
                               "num_draft_tokens", "num_accepted_tokens"}}, ...]}, ...]}

Chunks sit under their request (they share its request_id, group_id and prompt_len). A
chunk's ``spec`` (its speculation counters) may be absent: traces written before it was
saved load with zero counters.
`load_trace` checks types, ranges (non-negative counts and times, dispatched <= start <= end,
0 <= instance < num_instances), unique request ids, unique chunk_seq per request and known
finish reasons, and raises `ValueError` naming the first problem with its JSON path. The
loaded record lists chunks ordered by (dispatched_s, start_s, request order, chunk_seq); all
other content round-trips exactly.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transport.messages import (
    FINISH_REASONS,
    ChunkRecord,
    InstanceCounters,
    RequestRecord,
    RolloutRecord,
    SpecStats,
)

TRACE_VERSION = 2  # 2: counters named num_*, chunks carry their weight version
_REQUEST_FIELDS: dict[str, type] = {
    "request_id": str,
    "group_id": str,
    "prompt_id": str,
    "is_probe": bool,
    "prompt_len": int,
    "output_len": int,
    "arrival_s": float,
    "finish_s": float,
    "finish_reason": str,
}
_CHUNK_FIELDS: dict[str, type] = {
    "chunk_seq": int,
    "instance": int,
    "dispatched_s": float,
    "start_s": float,
    "end_s": float,
    "num_new_tokens": int,
    "generated_before": int,
    "num_reprefilled_tokens": int,
    "finish_reason": str,
    "weight_version": int,
}
_SPEC_FIELDS: dict[str, type] = {
    "num_steps": int,
    "num_tokens": int,
    "num_draft_tokens": int,
    "num_accepted_tokens": int,
}
_COUNTER_FIELDS: dict[str, type] = {
    "instance": int,
    "num_preemptions": int,
    "num_recomputed_tokens": int,
    "num_reprefilled_tokens": int,
    "num_draft_tokens": int,
    "num_accepted_tokens": int,
}


def trace_dict(record: RolloutRecord) -> dict[str, Any]:
    """The trace as JSON-able data (what `save_trace` writes)."""
    chunks: dict[str, list[dict[str, Any]]] = {r.request_id: [] for r in record.requests}
    for c in sorted(record.chunks, key=lambda c: (c.request_id, c.chunk_seq)):
        chunks.setdefault(c.request_id, []).append(
            {
                **{k: getattr(c, k) for k in _CHUNK_FIELDS},
                "spec": {k: getattr(c.spec, k) for k in _SPEC_FIELDS},
            }
        )
    requests = [
        {**{k: getattr(r, k) for k in _REQUEST_FIELDS}, "chunks": chunks[r.request_id]}
        for r in record.requests
    ]
    return {
        "version": TRACE_VERSION,
        "policy": record.policy,
        "num_instances": record.num_instances,
        "makespan_s": record.makespan_s,
        "instances": [{k: getattr(i, k) for k in _COUNTER_FIELDS} for i in record.instances],
        "requests": requests,
    }


def save_trace(record: RolloutRecord, path: str | Path) -> Path:
    """Write the record as a trace file (JSON); returns the path."""
    known = {r.request_id for r in record.requests}
    orphans = sorted({c.request_id for c in record.chunks} - known)
    if orphans:
        raise ValueError(f"chunks of unknown requests {orphans[:3]}: cannot write a trace")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(trace_dict(record)) + "\n")
    return out


def load_trace(path: str | Path) -> RolloutRecord:
    """Read and check a trace file; `ValueError` names the first problem found."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    try:
        return parse_trace(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def parse_trace(data: Any) -> RolloutRecord:
    """Check trace data (as `trace_dict` makes it) and build the record."""
    if not isinstance(data, dict):
        raise ValueError("trace must be a JSON object")
    if data.get("version") != TRACE_VERSION:
        raise ValueError(
            f"unsupported trace version {data.get('version')!r}, expected {TRACE_VERSION}"
        )
    policy = _field(data, "policy", str, "")
    num_instances = _field(data, "num_instances", int, "")
    if num_instances < 1:
        raise ValueError(f"num_instances must be >= 1, got {num_instances}")
    makespan = _field(data, "makespan_s", float, "")
    counters = [
        InstanceCounters(**_fields(i, _COUNTER_FIELDS, f"instances[{n}]"))
        for n, i in enumerate(_list(data, "instances", ""))
    ]
    requests: list[RequestRecord] = []
    seen: set[str] = set()
    chunks: list[tuple[tuple[float, float, int, int], ChunkRecord]] = []
    for n, raw in enumerate(_list(data, "requests", "")):
        where = f"requests[{n}]"
        req = RequestRecord(**_fields(raw, _REQUEST_FIELDS, where))
        if req.request_id in seen:
            raise ValueError(f"{where}.request_id: duplicate {req.request_id!r}")
        seen.add(req.request_id)
        requests.append(req)
        for c in _chunks(raw, req, num_instances, where):
            chunks.append(((c.dispatched_s, c.start_s, n, c.chunk_seq), c))
    chunks.sort(key=lambda kc: kc[0])
    return RolloutRecord(
        policy=policy,
        num_instances=num_instances,
        chunks=tuple(c for _, c in chunks),
        requests=tuple(requests),
        instances=tuple(counters),
        makespan_s=makespan,
    )


def _chunks(
    raw: dict[str, Any], req: RequestRecord, num_instances: int, where: str
) -> list[ChunkRecord]:
    out: list[ChunkRecord] = []
    for m, c in enumerate(_list(raw, "chunks", where)):
        at = f"{where}.chunks[{m}]"
        values = _fields(c, _CHUNK_FIELDS, at)
        if not 0 <= values["instance"] < num_instances:
            raise ValueError(f"{at}.instance: {values['instance']} not in [0, {num_instances})")
        if not values["dispatched_s"] <= values["start_s"] <= values["end_s"]:
            raise ValueError(f"{at}: need dispatched_s <= start_s <= end_s")
        if any(o.chunk_seq == values["chunk_seq"] for o in out):
            raise ValueError(f"{at}.chunk_seq: duplicate {values['chunk_seq']}")
        spec = SpecStats()
        if "spec" in c:
            spec = SpecStats(**_fields(c["spec"], _SPEC_FIELDS, f"{at}.spec"))
        out.append(
            ChunkRecord(
                request_id=req.request_id,
                group_id=req.group_id,
                prompt_len=req.prompt_len,
                spec=spec,
                **values,
            )
        )
    return out


def _fields(raw: Any, spec: dict[str, type], where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object")
    return {name: _field(raw, name, kind, where) for name, kind in spec.items()}


def _field(raw: dict[str, Any], name: str, kind: type, where: str) -> Any:
    at = f"{where}.{name}" if where else name
    if name not in raw:
        raise ValueError(f"{at}: missing")
    value = raw[name]
    is_bool = isinstance(value, bool)
    if kind is float and isinstance(value, int | float) and not is_bool:
        value = float(value)
    elif not isinstance(value, kind) or (kind is int and is_bool):
        raise ValueError(f"{at}: expected {kind.__name__}, got {type(value).__name__}")
    if kind in (int, float) and not 0 <= value < math.inf:  # also rejects NaN
        raise ValueError(f"{at}: must be finite and >= 0, got {value}")
    if name == "finish_reason" and value not in FINISH_REASONS:
        raise ValueError(
            f"{at}: unknown finish reason {value!r}, expected one of {', '.join(FINISH_REASONS)}"
        )
    return value


def _list(raw: dict[str, Any], name: str, where: str) -> list[Any]:
    at = f"{where}.{name}" if where else name
    value = raw.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{at}: expected a list, got {type(value).__name__}")
    return value
