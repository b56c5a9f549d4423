"""`seer sim gap`: the diagnostic context-aware variants and the critical-request analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.scheduler import RequestState
from pipeline.sim import gap
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, SimRequest, simulate

COST = CostModel.builtin("qwen2.5-7b")


def _req(rid: str, gid: str) -> RequestState:
    return RequestState(
        request_id=rid,
        group_id=gid,
        is_probe=False,
        prompt_len=8,
        max_new_tokens=1000,
        arrival=0,
    )


def test_true_group_max_known_and_revealed() -> None:
    known = gap.TrueGroupMax(
        1000, {"a": 900, "b": 100}, revealed=False, starvation_s=60.0, starvation_every=8
    )
    revealed = gap.TrueGroupMax(
        1000, {"a": 900, "b": 100}, revealed=True, starvation_s=60.0, starvation_every=8
    )
    assert known.estimate("a") == 900 and known.estimate("b") == 100
    # revealed: the generation limit until a sibling finishes, then the true longest (not
    # the finished sibling's length, which the live estimate would use)
    assert revealed.estimate("b") == 1000
    revealed.update_estimate("b", 40)
    assert revealed.estimate("b") == 100
    assert [r.request_id for r in known.order([_req("x", "b"), _req("y", "a")], 0.0)] == ["y", "x"]


def test_critical_request_is_the_last_to_finish_with_its_waits() -> None:
    reqs = [
        SimRequest(
            request_id=f"r{i}",
            group_id="g",
            prompt_id="p",
            is_probe=i == 0,
            prompt_len=16,
            output_len=n,
            max_new_tokens=2000,
        )
        for i, n in enumerate((100, 900, 300))
    ]
    cfg = SimConfig(
        num_instances=1, max_batch=1, kv_capacity=10_000, chunk_size=128, kv_pool="global"
    )
    res = simulate(reqs, "divided", cfg, COST)
    crit = gap.critical_request(res.record)
    assert crit["request_id"] == "r1" and crit["output_len"] == 900
    assert crit["num_chunks"] == 8  # ceil(900 / 128)
    # one slot, round robin: r1 waits while the others run chunks between its own
    assert crit["waits_between_chunks_s"] > 0
    assert crit["finish_s"] == pytest.approx(res.record.makespan_s)


def test_tiny_gap_run_writes_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "gap.json"
    gap.run(str(out), workloads=("kimi-k2",), scale=0.01, num_instances=2)
    data = json.loads(out.read_text())
    pols = data["workloads"]["kimi-k2"]["policies"]
    assert tuple(pols) == gap.VARIANTS
    assert pols["oracle"]["of_oracle"] == 1.0
    assert pols["ca_no_starvation"]["starvation_picks"] == 0
    assert data["label"] == "simulated"
