"""Seer's workloads over epochs (`seer sim seer --epochs`): the workload model, the history
acceptance table and the history-aware policies, at a tiny scale."""

from __future__ import annotations

import math

import pytest

from actors.scheduler.options import SchedulerOptions
from actors.scheduler.policy import LONG_BAND
from pipeline.sim.acceptance import measure_acceptance, measure_history_acceptance
from pipeline.sim.epochs import run_workload
from pipeline.sim.estimators import ExtrapolatingEstimator
from pipeline.sim.workload import (
    SEER_WORKLOADS,
    EpochModel,
    epoch_requests,
    rank_churn,
    seer_requests,
)

KIMI = SEER_WORKLOADS["kimi-k2"]


def test_epoch_one_is_seers_workload_and_later_epochs_recur_and_drift() -> None:
    one = epoch_requests(KIMI, 1, scale=0.1)
    assert [r.output_len for r in one] == [r.output_len for r in seer_requests(KIMI, scale=0.1)]
    assert epoch_requests(KIMI, 2, scale=0.1) == epoch_requests(KIMI, 2, scale=0.1)
    two = epoch_requests(KIMI, 2, scale=0.1)
    assert [r.prompt_id for r in two] == [r.prompt_id for r in one]
    assert {r.group_id for r in two}.isdisjoint({r.group_id for r in one})
    assert [r.output_len for r in two] != [r.output_len for r in one]
    # the samples recur: RhymeRL's 2-4% rank churn, where fresh spreads churn twice that
    churn = rank_churn(one, two)
    fresh = rank_churn(one, epoch_requests(KIMI, 2, scale=0.1, model=EpochModel(sample_corr=0)))
    assert 0.01 < churn < 0.05 < fresh
    # lengths grow with the drift (16 iterations at 5% each: about 2.2x, the cap aside)
    drift = EpochModel(drift=0.05, iterations_per_epoch=16)
    grown = epoch_requests(KIMI, 2, scale=0.1, model=drift)
    ratio = sum(r.output_len for r in grown) / sum(r.output_len for r in one)
    assert 1.5 < ratio < 1.05**16
    with pytest.raises(ValueError, match="epoch must be >= 1"):
        epoch_requests(KIMI, 0)
    with pytest.raises(ValueError, match="iterations_per_epoch"):
        EpochModel(iterations_per_epoch=0)


def test_history_in_the_draft_store_raises_acceptance_only_when_tokens_recur() -> None:
    plain = measure_acceptance()
    history = measure_history_acceptance(history=8)
    unrelated = measure_history_acceptance(history=8, recurrence=0.0)
    # no sibling ahead: the previous epoch's responses are what the tree drafts from
    assert history.expected_tokens(0, 8) > plain.expected_tokens(0, 8) + 0.4
    assert abs(unrelated.expected_tokens(0, 8) - plain.expected_tokens(0, 8)) < 0.15


def test_extrapolating_estimator_learns_how_far_the_longest_sibling_is() -> None:
    est = ExtrapolatingEstimator(10_000, min_groups=2)
    for g in range(2):  # the first to finish is half the longest
        est.open_group(f"g{g}", f"p{g}", 2)
        est.on_request_finished(f"g{g}", 100)
        est.on_request_finished(f"g{g}", 200)
        est.close_group(f"g{g}")
    assert math.isclose(est.factor(1), 2.0)
    est.open_group("new", "p9", 2)
    assert est.estimate("new") == 10_000  # nothing finished: the limit
    assert est.on_request_finished("new", 300) == 600
    with pytest.raises(ValueError, match="min_groups"):
        ExtrapolatingEstimator(10, min_groups=0)


def test_epochs_report_every_policy_and_the_prior_knows_the_groups() -> None:
    policies = ("baseline", "context_aware", "context_aware_prior", "seer", "seer_history")
    out = run_workload(
        "kimi-k2", epochs=2, policies=(*policies, "oracle"), scale=0.02, num_instances=2
    )
    one, two = out["epochs"]
    p1 = one["policies"]
    assert [one["epoch"], two["epoch"]] == [1, 2]
    for e in (one, two):
        assert set(e["policies"]) == {*policies, "oracle"} == set(e["ratios"])
        for p in e["policies"].values():
            assert {"throughput_tok_s", "tail_s", "preemptions"} <= set(p)
        assert e["ratios"]["baseline"] == 1.0
    # the prior policies rank with the live default long band, Seer's policies without
    assert p1["context_aware_prior"]["long_band"] == SchedulerOptions().long_band == LONG_BAND
    assert p1["seer_history"]["long_band"] == LONG_BAND > p1["context_aware"]["long_band"] == 1.0
    # epoch 2: the prior (last epoch's group max) is a far better estimate than the limit,
    # and history drafts are accepted longer than siblings' alone
    p2 = two["policies"]
    assert p2["context_aware_prior"]["estimate_error"] < p2["context_aware"]["estimate_error"] / 2
    assert p2["seer_history"]["mean_accept_len"] > p2["seer"]["mean_accept_len"] + 0.2
    assert "rank_churn" in two and "rank_churn" not in one
    strict = run_workload(
        "kimi-k2",
        epochs=1,
        policies=("context_aware", "ca_prior_strict", "ca_band", "ca_prior_probe_unknown"),
        scale=0.02,
        num_instances=2,
        long_band=1.5,
    )
    # epoch 1 has nothing to remember: the strict prior policy is its twin's run
    runs = strict["epochs"][0]["policies"]
    assert runs["ca_prior_strict"]["same_run_as"] == "context_aware"
    assert runs["ca_band"]["long_band"] == 1.5 and runs["ca_prior_strict"]["long_band"] == 1.0
    # the probe-rule study runs with the band and its own rule; Seer's keeps probes first
    unknown = runs["ca_prior_probe_unknown"]
    assert unknown["probe_first"] == "unknown" and unknown["long_band"] == 1.5
    assert runs["context_aware"]["probe_first"] == "always"
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        run_workload("kimi-k2", epochs=1, policies=("nope",), scale=0.02)
