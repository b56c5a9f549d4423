"""The simulator: live policy objects, determinism, conservation, Seer-scale JSON shape."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import actors.drafts.policy as draft_policy
import actors.estimator.core as estimator_core
import actors.scheduler.core as scheduler_core
import actors.scheduler.policy as scheduler_policy
from pipeline.records.metrics import compute_metrics
from pipeline.sim import seer
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, SimRequest, simulate
from pipeline.sim.simulator.events import _Run
from pipeline.sim.workload import SEER_WORKLOADS, seer_requests

COST = CostModel.builtin("qwen2.5-7b")


def workload(groups: int = 6, size: int = 4) -> list[SimRequest]:
    return [
        SimRequest(
            request_id=f"g{g}-{k}",
            group_id=f"g{g}",
            prompt_id=f"p{g}",
            is_probe=k == 0,
            prompt_len=64,
            output_len=200 + 150 * ((g * 7 + k * 3) % 9),
            max_new_tokens=2000,
        )
        for g in range(groups)
        for k in range(size)
    ]


def config(**kw: object) -> SimConfig:
    base: dict[str, object] = {
        "num_instances": 2,
        "max_batch": 8,
        "kv_capacity": 6000,
        "chunk_size": 256,
        "max_steps": 32,
    }
    return SimConfig(**(base | kw))  # type: ignore[arg-type]


def test_runs_the_live_policy_objects_not_copies() -> None:
    run = _Run(workload(), "context_aware", config(spec="group"), COST, None)
    assert type(run.core) is scheduler_core.SchedulerCore
    assert type(run.core.policy) is scheduler_policy.ContextAware
    assert type(run.estimator) is estimator_core.LengthEstimator
    assert all(type(p) is draft_policy.MarginalBenefitPolicy for p in run.spec)


@pytest.mark.parametrize("policy", ["baseline", "divided", "context_aware", "oracle"])
def test_every_request_finishes_with_its_length_and_runs_are_deterministic(policy: str) -> None:
    reqs = workload()
    a = simulate(reqs, policy, config(kv_pool="global" if policy == "divided" else "local"), COST)
    b = simulate(reqs, policy, config(kv_pool="global" if policy == "divided" else "local"), COST)
    assert a.record == b.record
    lengths = {r.request_id: r.output_len for r in a.record.requests}
    assert lengths == {r.request_id: r.output_len for r in reqs}
    for r in a.record.requests:  # chunks add up to the output, in order, without overlap
        chunks = sorted(
            (c for c in a.record.chunks if c.request_id == r.request_id), key=lambda c: c.chunk_seq
        )
        assert sum(c.num_new_tokens for c in chunks) == r.output_len
        assert all(x.end_s <= y.dispatched_s + 1e-9 for x, y in itertools.pairwise(chunks))
    if policy == "baseline":
        assert a.counters["dispatches"] == len(reqs)  # whole requests, no chunks
    else:
        assert a.counters["dispatches"] > len(reqs)


def test_kv_pressure_preempts_the_baseline_and_global_pool_moves_free() -> None:
    reqs = workload(groups=8)
    tight = config(kv_capacity=2500)
    base = compute_metrics(simulate(reqs, "baseline", tight, COST).record)
    assert base["num_preemptions"] > 0 and base["num_recomputed_tokens"] > 0
    # no affinity slack: chunks move to the least-loaded instance
    moving = config(kv_capacity=2500, affinity_spread=0)
    local = compute_metrics(simulate(reqs, "divided", moving, COST).record)
    pool = compute_metrics(
        simulate(
            reqs, "divided", config(kv_capacity=2500, affinity_spread=0, kv_pool="global"), COST
        ).record
    )
    assert local["chunks_moved"] > 0 and local["engine_num_reprefilled_tokens"] > 0
    assert pool["chunks_moved"] > 0 and pool["engine_num_reprefilled_tokens"] == 0


def test_grouped_speculation_drafts_and_speeds_the_tail() -> None:
    reqs = workload()
    off = simulate(reqs, "context_aware", config(kv_pool="global"), COST)
    on = simulate(reqs, "context_aware", config(kv_pool="global", spec="group"), COST)
    m_on = compute_metrics(on.record)
    assert m_on["mean_accept_len"] > 1.3  # drafts from the suffix-tree acceptance table
    assert on.record.makespan_s < off.record.makespan_s


def test_bad_config_and_input_raise() -> None:
    with pytest.raises(ValueError, match="kv_pool"):
        config(kv_pool="remote")
    with pytest.raises(ValueError, match="at least one"):
        simulate([], "divided", config(), COST)
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(workload(), "fastest", config(), COST)
    with pytest.raises(ValueError, match="max_prefill_tokens"):
        config(max_prefill_tokens=0)


def test_seer_workloads_follow_the_published_statistics() -> None:
    w = SEER_WORKLOADS["qwen2-vl-72b"]
    reqs = seer_requests(w, scale=1.0)
    mean = sum(r.output_len for r in reqs) / len(reqs)
    assert len(reqs) == 9600 and abs(mean - 7615) / 7615 < 0.02
    assert max(r.output_len for r in reqs) == 40960  # some hit the limit
    assert sum(r.is_probe for r in reqs) == 9600 // 16


def test_tiny_seer_run_writes_the_json_shape(tmp_path: Path) -> None:
    out = tmp_path / "sim-seer.json"
    seer.run(str(out), workloads=("moonlight",), scale=0.005, num_instances=2, chunk_size=4096)
    data = json.loads(out.read_text())
    w = data["workloads"]["moonlight"]
    assert set(w["policies"]) == {"baseline", "divided", "context_aware", "seer", "oracle"}
    for p in w["policies"].values():
        assert {"throughput_tok_s", "tail_s", "preemptions"} <= set(p)
    assert w["ratios"]["baseline"] == 1.0 and w["ratios"]["seer"] > 1.0
    assert data["settings"]["label"] == "simulated"
    assert Path(data["timeline_png"]).stat().st_size > 0


def test_finish_times_and_makespan_are_engine_ends_as_live_records_are() -> None:
    """Live, a request finishes when its generator ends the chunk (the generator's clock),
    not when the scheduler hears of it; the simulated record uses the same event."""
    reqs = workload(groups=3)
    slow = simulate(reqs, "context_aware", config(result_latency_s=0.05), COST).record
    ends = {c.request_id: c.end_s for c in slow.chunks if c.finish_reason != "chunk"}
    assert {r.request_id: r.finish_s for r in slow.requests} == ends
    assert slow.makespan_s == max(c.end_s for c in slow.chunks)
    late = simulate(reqs, "context_aware", config(start_latency_s=0.2), COST).record
    assert min(c.dispatched_s for c in late.chunks) == pytest.approx(0.2)
    on_time = simulate(reqs, "context_aware", config(), COST).record
    assert late.makespan_s == pytest.approx(on_time.makespan_s + 0.2)
    with pytest.raises(ValueError, match="step_overhead_s"):
        config(step_overhead_s=-1.0)


def test_an_instance_at_half_speed_takes_twice_as_long() -> None:
    """`instance_speed` (the speed-normalized replay): with no latencies every duration is
    a step's price, so one instance whose steps cost twice the table finishes its work in
    exactly twice the time, and two at different speeds split the same schedule apart."""
    reqs = workload(groups=3)
    one = config(num_instances=1)
    base = simulate(reqs, "divided", one, COST)
    slow = simulate(reqs, "divided", config(num_instances=1, instance_speed=(2.0,)), COST)
    assert slow.record.makespan_s == pytest.approx(2 * base.record.makespan_s)
    assert slow.extra["num_steps"] == base.extra["num_steps"]
    mixed = simulate(reqs, "baseline", config(instance_speed=(1.0, 3.0)), COST)
    plain = simulate(reqs, "baseline", config(), COST)
    assert mixed.extra["engine_s"][0] == pytest.approx(plain.extra["engine_s"][0])
    assert mixed.extra["engine_s"][1] == pytest.approx(3 * plain.extra["engine_s"][1])
    with pytest.raises(ValueError, match="instance_speed has 1 factors for 2"):
        simulate(reqs, "divided", config(instance_speed=(1.0,)), COST)
