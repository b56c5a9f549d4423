"""`seer bench agentic --quick`: the four policies on live multi-turn episodes (real
processes: generators, environment actors), the JSON shape, no sample lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.agentic import QUICK, run
from pipeline.sim.agentic import POLICIES, episodes


@pytest.mark.slow
def test_agentic_bench_writes_the_json_shape_with_none_lost(tmp_path: Path) -> None:
    out = tmp_path / "agentic.json"
    run(str(out), quick=True)
    saved = json.loads(out.read_text())
    assert set(saved["policies"]) == set(POLICIES) == set(saved["ratios"])
    assert saved["ratios"]["baseline"] == pytest.approx(1.0)
    total = sum(ep.length for g in episodes(QUICK) for ep in g)
    for p in saved["policies"].values():
        assert {"makespan_s", "tail_s", "throughput_tok_s", "reprefill_tokens", "lost"} <= set(p)
        assert p["lost"] == 0 and p["end_reasons"] == ["done"]
        assert p["output_tokens"] == total  # every drawn turn and observation, no more
        assert p["makespan_s"] > 0 and p["throughput_tok_s"] > 0
