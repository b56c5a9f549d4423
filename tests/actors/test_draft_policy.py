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
    # budget: g* = 1 with a 30% cost per token -> 1 token per running request = 3
    policy = MarginalBenefitPolicy(SpecConfig(probe_weight=2.0), lambda b, g: 1.0 + 0.3 * g)
    cands = [
        Candidate("a", False, [0.9, 0.85, 0.8]),
        Candidate("b", False, [0.3]),
        Candidate("p", True, [0.2, 0.1]),
    ]
    grant = policy.allocate(3, cands)
    # p gets its probe token; then a (0.9), a (0.85) beat b (0.3) and p's second (2 x 0.1)
    assert grant == {"p": 1, "a": 2}


def test_budget_too_small_for_every_probe_means_no_drafts() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.3 * g)  # g* = 1
    cands = [Candidate(f"p{i}", True, [0.9]) for i in range(3)]
    assert policy.allocate(2, cands) == {}  # budget 2 < 3 probes


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
