"""The simulator's multi-turn replay: deterministic, environment latency between turns in
the makespan, parked KV reused by sticky turns and re-prefilled by fresh ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pipeline.sim import agentic
from pipeline.sim.agentic import AgenticWorkload, episodes, sim_requests, simulate_policies
from pipeline.sim.costmodel import CostModel
from pipeline.sim.simulator import SimConfig, SimRequest
from pipeline.sim.simulator.turns import EpisodeTrace, simulate_turns

COST = CostModel.builtin("qwen2.5-7b")
SMALL = AgenticWorkload(
    num_groups=6, group_size=4, prompt_len=64, mean_turns=3.0, max_turns=6, mean_action=200,
    max_action=800, action_sigma=0.5, min_obs=16, max_obs=128, latency_median_s=0.5,
    latency_sigma=1.0, max_latency_s=5.0, seed=3,
)  # fmt: skip


def _one(latencies: tuple[float, ...]) -> float:
    ep = EpisodeTrace((100, 50, 70), (20, 30), latencies)
    req = SimRequest(request_id="r", group_id="g", prompt_id="p", is_probe=True, prompt_len=32,
                     output_len=ep.length, max_new_tokens=ep.length)  # fmt: skip
    config = SimConfig(num_instances=1, max_batch=8, kv_capacity=10_000, chunk_size=64)
    res = simulate_turns([req], {"r": ep}, "context_aware", config, COST)
    assert [r.output_len for r in res.record.requests] == [ep.length]
    # back on its instance, a turn prefills its observation and the last action token
    # (sampled, its KV not yet written), as the engine does: 1 re-prefilled token a turn
    assert res.extra["observation_tokens"] == 50 and res.extra["reprefill_tokens"] == 2
    return res.record.makespan_s


def test_environment_latency_between_turns_is_in_the_makespan() -> None:
    base = _one((0.0, 0.0))
    assert _one((1.5, 2.25)) == pytest.approx(base + 3.75, abs=1e-6)


def test_multi_turn_replay_is_deterministic_and_fresh_turns_re_prefill() -> None:
    kw = {"num_instances": 3, "kv_capacity": 200_000, "chunk_size": 128, "max_batch": 8}
    first = simulate_policies(SMALL, COST, **kw)
    second = simulate_policies(SMALL, COST, **kw)
    for out in (first, second):
        for p in out["policies"].values():
            p.pop("sim_wall_s")
    assert first == second
    pols = first["policies"]
    assert set(pols) == set(agentic.POLICIES) == set(first["ratios"])
    assert all(p["lost"] == 0 and p["makespan_s"] > 0 for p in pols.values())
    # a fresh request per turn lands away from its KV and re-prefills its context
    assert pols["baseline"]["reprefill_tokens"] > 10 * max(1, pols["divided"]["reprefill_tokens"])
    total = sum(ep.length for g in episodes(SMALL) for ep in g)
    assert pols["oracle"]["throughput_tok_s"] * pols["oracle"]["makespan_s"] == pytest.approx(total)


def test_workload_is_group_correlated_and_bad_input_is_refused() -> None:
    groups = episodes(dataclasses.replace(SMALL, num_groups=60, sample_sigma=0.1))
    turns = [[len(ep.actions) for ep in g] for g in groups]
    within = sum(max(t) - min(t) for t in turns) / len(turns)
    means = sorted(sum(t) / len(t) for t in turns)
    assert within < means[-1] - means[0]  # groups differ more than their samples do
    with pytest.raises(ValueError, match="observations and latencies"):
        EpisodeTrace((5, 5), (), ())
    reqs, by_id = sim_requests(SMALL, episodes(SMALL))
    by_id["g0-0"] = EpisodeTrace((5,), (), ())
    config = SimConfig(num_instances=1, max_batch=8, kv_capacity=10_000, chunk_size=64)
    with pytest.raises(ValueError, match="g0-0"):
        simulate_turns(reqs, by_id, "divided", config, COST)
    with pytest.raises(ValueError, match="kv_pool"):
        simulate_turns(reqs, by_id, "divided", dataclasses.replace(config, kv_pool="global"), COST)


def test_sim_agentic_writes_the_table_labelled_simulated(tmp_path: Path) -> None:
    out = tmp_path / "agentic.json"
    agentic.run(str(out), scale=0.01, num_instances=2)
    saved = json.loads(out.read_text())
    assert saved["settings"]["label"] == "simulated"
    assert saved["ratios"]["baseline"] == pytest.approx(1.0)
    for p in saved["policies"].values():
        assert {"makespan_s", "tail_s", "throughput_tok_s", "reprefill_tokens", "lost"} <= set(p)
