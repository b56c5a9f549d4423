"""Reading the actors' JSON log events (structlog, one object a line) back, to time what a
fault case saw: which events, and when."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any


def events(path: Path | None, event: str) -> list[dict[str, Any]]:
    """The JSON log events named `event` in the actor log at `path`."""
    if path is None or not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("event") == event:
            out.append(record)
    return out


def timestamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()
