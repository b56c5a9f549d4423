from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.transport import run


@pytest.mark.slow
def test_transport_bench_reports_both_variants(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = run(str(out), quick=True)
    assert json.loads(out.read_text()) == result
    small, tensor = result["small_msgs"], result["tensor"]
    assert small["ours_msgs_per_s"] > 0 and small["raw_msgs_per_s"] > 0
    assert small["ratio"] == pytest.approx(small["ours_msgs_per_s"] / small["raw_msgs_per_s"])
    assert 0 < small["p50_us"] <= small["p99_us"]
    assert tensor["ours_MBps"] > 0 and tensor["raw_MBps"] > 0
