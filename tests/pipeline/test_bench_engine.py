"""`seer bench engine --quick` runs and writes the documented JSON keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.engine import run


@pytest.mark.slow
def test_engine_bench_quick_writes_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    result = run(str(path), quick=True)
    data = json.loads(path.read_text())
    assert data.keys() == result.keys()
    assert [r["batch"] for r in data["decode"]] == [1, 8, 32]
    assert all(r["tokens_per_s"] > 0 for r in data["decode"])
    assert {(r["batch"], r["draft_len"]) for r in data["verify"]} >= {(1, 0), (32, 8)}
    assert [r["batch"] for r in data["spec_speedup"]] == [1, 8, 32]
    assert all(isinstance(r["outputs_match"], bool) for r in data["spec_grid"])
