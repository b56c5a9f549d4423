"""`seer bench rollout --backend sglang` writes both backends' policies, shaped as the
rollout bench's, over `seer serve` servers its generators launch (a tiny workload here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.bench import sglang_rollout
from pipeline.bench.rollout import POLICIES
from pipeline.records.workload import make_workload


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_both_backends_run_every_policy_in_one_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def tiny(**_: Any) -> Any:
        return make_workload(num_groups=2, group_size=2, mean_len=24, max_len=48, min_len=8)

    monkeypatch.setattr(sglang_rollout, "make_workload", tiny)
    out = tmp_path / "bench.json"
    sglang_rollout.run(str(out), quick=True, chunk_size=16, per_chunk_samples=3, mode="inprocess")
    saved = json.loads(out.read_text())
    total = saved["workload"]["total_tokens"]
    for backend in ("torch", "sglang"):
        policies = saved["backend"][backend]["policies"]
        assert set(policies) == set(POLICIES)
        for p in policies.values():
            assert p["output_tokens"] == total and p["throughput_tok_s"] > 0 and p["tail_s"] >= 0
    assert set(saved["sglang_over_torch"]) == set(POLICIES) == set(saved["paired"])
    for pair in saved["paired"].values():  # one repeat: one pair
        assert len(pair["ratios"]) == 1 and pair["min"] == pair["median"] == pair["max"] > 0
    assert saved["per_chunk"]["over_http_s"] > 0 and saved["per_chunk"]["in_process_s"] > 0
