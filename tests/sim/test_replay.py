"""Grouped drafts replayed on recorded output: the live Speculator, real suffix trees over
the siblings' tokens as far as the simulation has generated them, drafts verified against
each request's own continuation."""

from __future__ import annotations

import dataclasses
import random

import pytest

import actors.generator.speculator as live_speculator
from actors.drafts.options import SpecConfig
from actors.drafts.policy import MarginalBenefitPolicy
from actors.generator.engine import Draft
from pipeline.records.metrics import compute_metrics
from pipeline.sim.costmodel import DATA_DIR, CostModel, load_table
from pipeline.sim.replay import ReplayClient, ReplayTrees, accepted_len
from pipeline.sim.simulator import SimRequest, recorded_step_times, simulate
from pipeline.sim.simulator.events import _Run
from pipeline.sim.workload import from_record
from tests.sim.test_simulator import COST, config, workload


def _with_tokens(reqs: list[SimRequest], make: object) -> list[SimRequest]:
    rng = random.Random(0)
    out = []
    for r in reqs:
        tokens = make(rng, r)  # type: ignore[operator]
        out.append(dataclasses.replace(r, token_ids=tuple(tokens)))
    return out


def _looping(rng: random.Random, r: SimRequest) -> list[int]:
    """The group's motif repeated (siblings alike), a token changed now and then."""
    motif_rng = random.Random(r.group_id)
    motif = [motif_rng.randrange(200) for _ in range(11)]
    n = r.output_len
    return [motif[i % 11] if rng.random() > 0.03 else rng.randrange(200) for i in range(n)]


def _noise(rng: random.Random, r: SimRequest) -> list[int]:
    return [rng.randrange(50_000) for _ in range(r.output_len)]


def test_accepted_len_walks_the_draft_tree_along_the_continuation() -> None:
    chain = Draft((5, 6, 7), (-1, 0, 1))
    assert accepted_len(chain, [5, 6, 7, 8]) == 3
    assert accepted_len(chain, [5, 6, 9]) == 2
    assert accepted_len(chain, [4, 6, 7]) == 0
    assert accepted_len(chain, [5]) == 1  # the chunk ends: no more to accept
    tree = Draft((5, 9, 6, 3), (-1, -1, 0, 1))  # two paths: 5-6 and 9-3
    assert accepted_len(tree, [9, 3, 1]) == 2
    assert accepted_len(tree, [5, 3]) == 1


def test_replay_runs_the_live_speculator_and_drafts_from_the_siblings() -> None:
    reqs = _with_tokens(workload(), _looping)
    run = _Run(reqs, "context_aware", config(spec="group"), COST, None)
    assert run.replay
    assert all(type(s) is live_speculator.Speculator for s in run.speculators)
    assert all(type(s.client) is ReplayClient for s in run.speculators)
    assert [s.policy for s in run.speculators] == run.spec
    loops = simulate(reqs, "context_aware", config(spec="group"), COST)
    noise = simulate(_with_tokens(workload(), _noise), "context_aware", config(spec="group"), COST)
    off = simulate(reqs, "context_aware", config(), COST)
    m_loops, m_noise = compute_metrics(loops.record), compute_metrics(noise.record)
    # alike siblings: long accepted drafts, fewer steps, a shorter rollout
    assert m_loops["mean_accept_len"] > 3.0
    assert sum(loops.extra["num_steps"]) < 0.6 * sum(off.extra["num_steps"])
    assert loops.record.makespan_s < off.record.makespan_s
    # text with nothing to find: the policy drafts (explores) a little, nothing holds
    assert m_noise["num_accepted_tokens"] == 0
    assert m_noise["mean_accept_len"] == pytest.approx(1.0)
    # the output is the recorded one whatever the drafts (lossless verification)
    lengths = {r.request_id: r.output_len for r in loops.record.requests}
    assert lengths == {r.request_id: r.output_len for r in reqs}
    assert simulate(reqs, "context_aware", config(spec="group"), COST).record == loops.record


def test_a_policy_lives_on_into_the_next_rollout_without_being_changed() -> None:
    reqs = _with_tokens(workload(), _looping)
    first = simulate(reqs, "divided", config(spec="group"), COST)
    learnt = first.extra["spec_policies"]
    assert all(type(p) is MarginalBenefitPolicy for p in learnt)
    seen = [p._num_observed for p in learnt]
    assert min(seen) > 0
    again = simulate(reqs, "context_aware", config(spec="group"), COST, spec_state=learnt)
    assert [p._num_observed for p in learnt] == seen  # copied, not continued in place
    assert all(p._num_observed > s for p, s in zip(again.extra["spec_policies"], seen, strict=True))
    with pytest.raises(ValueError, match="spec_state has 1 policies for 2 instances"):
        simulate(reqs, "divided", config(spec="group"), COST, spec_state=learnt[:1])


def test_recorded_tokens_must_cover_every_request() -> None:
    reqs = _with_tokens(workload(), _looping)
    short = [dataclasses.replace(reqs[0], token_ids=reqs[0].token_ids[:-1]), *reqs[1:]]
    with pytest.raises(ValueError, match="whole output"):
        simulate(short, "divided", config(spec="group"), COST)
    partial = [dataclasses.replace(reqs[0], token_ids=()), *reqs[1:]]
    with pytest.raises(ValueError, match="whole output"):
        simulate(partial, "divided", config(spec="group"), COST)


def test_from_record_attaches_each_requests_tokens_or_says_which_are_missing() -> None:
    reqs = _with_tokens(workload(groups=2, size=2), _looping)
    record = simulate(reqs, "divided", config(), COST).record
    tokens = {r.request_id: r.token_ids for r in reqs}
    back = from_record(record, 2000, tokens)
    assert {r.request_id: r.token_ids for r in back} == tokens
    del tokens[reqs[1].request_id]
    with pytest.raises(ValueError, match=f"request {reqs[1].request_id} made"):
        from_record(record, 2000, tokens)


def test_the_policy_budgets_as_the_priced_engine_pays_for_drafts() -> None:
    """A "max" table (the built-in engine: verify tokens padded to the longest draft)
    gives the replayed speculators the depth budget the live generator's engine asks for;
    the H200 tables (mean draft) the node budget."""
    reqs = _with_tokens(workload(), _looping)
    padded_cost = CostModel(
        load_table(DATA_DIR / "costmodel_h200.json")["rows"], "qwen2.5-7b", context="max"
    )
    assert padded_cost.pads_drafts and not COST.pads_drafts
    spread = simulate(reqs, "divided", config(spec="group"), COST)
    padded = simulate(reqs, "divided", config(spec="group"), padded_cost)
    assert [p.padded for p in spread.extra["spec_policies"]] == [False, False]
    assert [p.padded for p in padded.extra["spec_policies"]] == [True, True]
    # both budgets still draft on looping siblings (which one is chosen is asserted above)
    m_spread, m_padded = compute_metrics(spread.record), compute_metrics(padded.record)
    assert m_padded["mean_accept_len"] > 1.5 and m_spread["mean_accept_len"] > 1.5


def _recorded(max_batch: int, draft_cost: float) -> tuple[tuple[int, int, float], ...]:
    """(B, g, seconds) rows: 10 ms a step plus ``draft_cost`` of it per draft token."""
    return tuple(
        (b, g, 0.01 * (1 + draft_cost * g)) for b in range(1, max_batch + 1) for g in range(9)
    )


def test_recorded_step_times_price_the_replayed_policies_drafts() -> None:
    """The T(B, g) a live generator's policy read (recorded in its step log) is what the
    replayed policy on that instance prices drafts by: cheap drafts are granted, drafts
    dearer than anything they could return are not (on the same trees and table)."""
    reqs = _with_tokens(workload(), _looping)
    cfg = config(spec="group")
    cheap = dataclasses.replace(cfg, spec_step_times=(_recorded(cfg.max_batch, 0.01),) * 2)
    dear = dataclasses.replace(cfg, spec_step_times=(_recorded(cfg.max_batch, 50.0),) * 2)
    m_cheap = compute_metrics(simulate(reqs, "context_aware", cheap, COST).record)
    m_dear = compute_metrics(simulate(reqs, "context_aware", dear, COST).record)
    assert m_cheap["mean_accept_len"] > 3.0
    assert m_dear["num_draft_tokens"] < 0.05 * m_cheap["num_draft_tokens"]
    # one table per instance, or none
    with pytest.raises(ValueError, match="spec_step_times has 1 tables for 2 instances"):
        dataclasses.replace(cfg, spec_step_times=(_recorded(4, 0.01),))


def test_recorded_step_times_interpolate_nothing_and_scale_past_the_largest_batch() -> None:
    times = recorded_step_times(_recorded(4, 0.5))
    assert times(3, 2) == pytest.approx(0.02)
    assert times(8, 0) == pytest.approx(0.02)  # twice the largest batch: twice its time
    assert times(2, 12) == times(2, 8)  # g clamped to the recorded range
    with pytest.raises(ValueError, match=r"no row for \(B, g\) = \(2, 3\)"):
        recorded_step_times([r for r in _recorded(4, 0.5) if r[:2] != (2, 3)])
    with pytest.raises(ValueError, match="no rows"):
        recorded_step_times([])


def test_replayed_trees_start_each_sibling_with_the_prompt_tail_as_live() -> None:
    """A request that has generated nothing yet drafts its sibling's first tokens: its
    matcher starts in the prompt tail, which every sequence of the group begins with (the
    live draft store's layout); without the tail there is nothing to match yet."""
    tail = (101, 102, 103, 104)
    ahead = (7, 8, 9, 10, 11, 12)
    made = {0: 0, 1: len(ahead)}  # request 1 is six tokens ahead of request 0

    def drafted(tails: list[tuple[int, ...]]) -> tuple[int, ...]:
        trees = ReplayTrees([ahead, ahead], {"g": [0, 1]}, made.__getitem__, SpecConfig(), tails)
        client = ReplayClient(trees, {"r0": 0, "r1": 1})
        client.start("r0", "g", 1, tails[0] if tails else (), ())
        got = client.speculate("r0", max_tokens=4)
        return got.token_ids if got is not None else ()

    assert drafted([tail, tail]) == ahead[:4]
    assert drafted([]) == ()


def test_fresh_replayed_policies_count_the_live_warm_up_steps_first() -> None:
    """A live generator's policy counts every engine step with decoding rows, the
    topology's warm-up rollout's too, and explores when ``explore_every`` steps passed
    without a draft: the replay's fresh policies count the same steps (``spec_prelude``)
    before the first rollout, and not again when they carry on from an earlier one."""
    reqs = _with_tokens(workload(), _looping)
    prelude = ((2,) * 7, (1, 2) * 4)
    cfg = config(spec="group", spec_prelude=prelude)
    run = _Run(reqs, "baseline", cfg, COST, None)
    assert [p._steps for p in run.spec] == [7, 8]
    assert [p._steps for p in _Run(reqs, "baseline", config(spec="group"), COST, None).spec] == [
        0,
        0,
    ]
    learnt = simulate(reqs, "baseline", cfg, COST).extra["spec_policies"]
    carried = _Run(reqs, "divided", cfg, COST, None, spec_state=learnt)
    assert [p._steps for p in carried.spec] == [p._steps for p in learnt]
    with pytest.raises(ValueError, match="spec_prelude has 1 step lists for 2 instances"):
        config(spec="group", spec_prelude=((2,),))
