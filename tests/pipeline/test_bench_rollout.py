from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.rollout import POLICIES, run


@pytest.mark.slow
def test_rollout_bench_runs_every_policy_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    summary = run(str(out), quick=True)
    saved = json.loads(out.read_text())
    assert set(saved["policies"]) == set(POLICIES) == set(saved["ratios"])
    assert saved["ratios"]["baseline"] == pytest.approx(1.0)
    for p in saved["policies"].values():
        assert p["makespan_s"] > 0 and p["throughput_tok_s"] > 0
        assert 0 < p["lower_bound_s"] <= p["makespan_s"] * (1 + 1e-9)  # a real lower bound
        assert 0 < p["efficiency"] <= 1.0 + 1e-9
        assert p["ideal_s"] > 0  # the measured estimate, reported beside it
        assert p["output_tokens"] == summary["workload"]["total_tokens"]
    assert Path(saved["timeline_png"]).stat().st_size > 5000
    assert Path(saved["trace"]).exists()
    # --trace replays it (at the smallest size: one run of one policy)
    replay = run(
        str(tmp_path / "replay.json"), trace=saved["trace"], quick=True, policies=("baseline",)
    )
    assert replay["workload"]["total_tokens"] == summary["workload"]["total_tokens"]
