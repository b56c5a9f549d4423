"""The speculation budget: online acceptance, Seer's marginal-benefit policy (MBA), fixed."""

from __future__ import annotations

import pytest

from actors.drafts.policy import (
    AcceptanceStats,
    Candidate,
    FixedPolicy,
    MarginalBenefitPolicy,
    SpecConfig,
)


def flat(batch: int, g: int) -> float:
    """A step costs the same whatever the draft: drafting always pays."""
    return 1.0


def steep(batch: int, g: int) -> float:
    """Every draft token costs a whole step: drafting never pays."""
    return 1.0 + g


def test_acceptance_per_position_is_conditional() -> None:
    stats = AcceptanceStats(4, prior_weight=0.0)
    stats.observe(4, 2)  # positions 1, 2 accepted, 3 rejected, 4 never reached
    stats.observe(4, 4)
    assert stats.reached == [0, 2, 2, 2, 1]
    assert stats.accepted == [0, 2, 2, 1, 1]
    assert stats.alpha(3) == 0.5
    assert stats.expected_tokens(2) == 3.0  # 1 + 1 + 1
    assert stats.expected_tokens(4) == pytest.approx(1 + 1 + 1 + 0.5 + 0.5)


def test_prior_until_measured() -> None:
    stats = AcceptanceStats(8, prior=0.5)
    assert stats.alpha(1) == 0.5
    assert stats.expected_tokens(1) == 1.5


def test_best_draft_len_follows_step_cost() -> None:
    cfg = SpecConfig(g_max=8)
    assert MarginalBenefitPolicy(cfg, flat).best_draft_len(16) == 8
    assert MarginalBenefitPolicy(cfg, steep).best_draft_len(16) == 0
    # cost grows by 30% of a step per draft token: with alpha = 0.5 one token pays
    # (1.3 / 1.5 < 1) and a second does not (1.6 / 1.75 > 1.3 / 1.5)
    policy = MarginalBenefitPolicy(cfg, lambda b, g: 1.0 + 0.3 * g)
    assert policy.best_draft_len(4) == 1


def test_no_speculation_when_it_does_not_pay() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), steep)
    cands = [Candidate("a", False, [0.9, 0.8]), Candidate("p", True, [0.9])]
    assert policy.allocate(2, cands) == {}


def test_probes_first_then_the_largest_weighted_gain() -> None:
    # each draft token per row costs 30% of a step; B = 3
    policy = MarginalBenefitPolicy(SpecConfig(probe_weight=2.0), lambda b, g: 1.0 + 0.3 * g)
    cands = [
        Candidate("a", False, [0.9, 0.85, 0.8]),
        Candidate("b", False, [0.3]),
        Candidate("p", True, [0.2, 0.1]),
    ]
    grant = policy.allocate(3, cands)
    # order: p's probe token, a 0.9, 0.85, 0.8, b 0.3, p 2 x 0.1; tokens per second
    # (3 + sum p) / (1 + 0.3 n / 3) peaks at n = 4: 5.75 / 1.4
    assert grant == {"p": 1, "a": 3}


def test_budget_below_the_probes_means_no_drafts() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.3 * g)
    # one probe token pays (2.9 / 1.15 > 2), two do not (3.0 / 1.3 < 2.52): budget 1 < 2
    assert policy.allocate(2, [Candidate("p0", True, [0.9]), Candidate("p1", True, [0.1])]) == {}


def test_measured_calibration_turns_optimistic_trees_off() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.3 * g)
    cands = [Candidate("a", False, [0.9, 0.8])]
    assert policy.allocate(1, cands) == {"a": 2}
    for _ in range(200):  # the trees promised 1.7 tokens a step; none was accepted
        policy.observe(2, 0, predicted=1.7)
    assert policy.calibration.factor < 0.05
    assert policy.allocate(1, cands) == {}


def test_grants_never_exceed_g_max_or_the_draft() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(g_max=3), flat)
    grant = policy.allocate(2, [Candidate("a", False, [0.9] * 10), Candidate("b", False, [0.5])])
    assert grant == {"a": 3, "b": 1}


def test_multipath_only_in_the_tail() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(paths=4, multipath_max_batch=4), flat)
    assert policy.paths(2) == 4 and policy.paths(16) == 1


def test_fixed_policy_gives_every_draft_its_length() -> None:
    policy = FixedPolicy(SpecConfig(budget="fixed", fixed_len=3))
    assert policy.max_nodes(32) == 3
    assert policy.allocate(2, [Candidate("a", False, [0.5] * 3), Candidate("b", False, [])]) == {
        "a": 3
    }


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "both"}, "mode"),
        ({"budget": "greedy"}, "budget"),
        ({"g_max": 0}, "g_max"),
        ({"min_prob": 2.0}, "min_prob"),
        ({"max_match": 64, "tree_depth": 64}, "max_match"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SpecConfig(**kwargs)  # type: ignore[arg-type]
