from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.scheduler import CHUNKS_PER_REQUEST, INSTANCES, run


@pytest.mark.slow
def test_scheduler_bench_reports_every_instance_count(tmp_path: Path) -> None:
    # 2 and 8 stand-in generators: 32 is the same code with 24 more processes to start (about
    # half a minute on 2 cores); `seer bench scheduler` itself runs all of INSTANCES
    assert INSTANCES == (2, 8, 32)
    out = tmp_path / "bench.json"
    result = run(str(out), quick=True, instances=(2, 8))
    saved = json.loads(out.read_text())
    assert saved == result
    assert set(saved["instances"]) == {"2", "8"}
    for m in saved["instances"].values():
        assert m["chunks_per_s"] > 0 and 0 <= m["p50_ms"] <= m["p99_ms"]
        assert m["sched_cpu_us_per_chunk"] >= 0
        # every request finished, each with exactly the chunks its forced length makes
        assert m["num_requests"] == saved["num_requests"]
        assert m["num_chunks"] == saved["num_requests"] * CHUNKS_PER_REQUEST
        assert m["chunks_per_request"] == [CHUNKS_PER_REQUEST]
        assert m["finish_reasons"] == ["length"]
