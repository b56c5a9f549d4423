"""`seer bench serve --quick` runs the engine and a `seer serve` subprocess side by side and
writes the documented JSON; its ratios divide numbers of that run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.serve import VARIANTS, run


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_serve_bench_quick_writes_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    result = run(str(path), quick=True)
    data = json.loads(path.read_text())
    assert data.keys() == result.keys() == {"workload", "tok_s", "samples_tok_s", "ratio_vs_engine"}
    assert set(data["tok_s"]) == set(VARIANTS)
    assert all(data["tok_s"][v] > 0 for v in VARIANTS)
    for v in VARIANTS:
        expected = data["tok_s"][v] / data["tok_s"]["engine"]
        assert data["ratio_vs_engine"][v] == pytest.approx(expected)
