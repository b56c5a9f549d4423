"""Reading back what a wandb offline run wrote (tests only): its ``run-<id>.wandb`` file.

wandb 0.31 has no Python reader of its own any more (the Go core writes the file), so this
reads the format directly: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then
LevelDB-log records in 32 KiB blocks (a 7-byte header each: CRC32, little-endian length,
type full/first/middle/last; a block's tail shorter than a header is padding), each record
a ``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path) -> list[Any]:
    """Every protobuf `Record` in a ``.wandb`` file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # padding at a block's end
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:  # zeros: the unwritten rest of the file
            break
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def offline_run(folder: Path) -> Path:
    """The one offline run under ``folder/wandb/``."""
    [run] = sorted((folder / "wandb").glob("offline-run-*"))
    return run


def history(folder: Path) -> list[dict[str, Any]]:
    """The logged history rows of the run under ``folder``: ``{key: value}`` with ``_step``."""
    [file] = offline_run(folder).glob("run-*.wandb")
    rows = []
    for record in wandb_records(file):
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})  # fmt: skip
    return rows


def config(folder: Path) -> dict[str, Any]:
    """The run's config as logged (the last value of every key)."""
    [file] = offline_run(folder).glob("run-*.wandb")
    out: dict[str, Any] = {}
    for record in wandb_records(file):
        kind = record.WhichOneof("record_type")
        items = record.config.update if kind == "config" else []
        if kind == "run":
            items = record.run.config.update
        for item in items:
            out[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    return out
