"""The speculation budget: online acceptance, Seer's marginal-benefit policy (MBA), fixed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from actors.drafts.measured import MIN_EXTRA, MeasuredCost
from actors.drafts.policy import (
    MAX_EXPLORE_BACKOFF,
    MIN_NODE_GAIN,
    AcceptanceStats,
    Calibration,
    Candidate,
    FixedPolicy,
    MarginalBenefitPolicy,
    SpecConfig,
)
from actors.generator.engine import Draft
from actors.generator.speculator import node_outcomes


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


def trusted(policy: MarginalBenefitPolicy, rate: float, nodes: int = 4000) -> None:
    """Verified drafts whose nodes were accepted at `rate` whatever their probability."""
    probs = [(i % 10 + 0.5) / 10 for i in range(10)]
    for i in range(nodes // 10):
        policy.observe(1, 0, probs, [(i * 10 + j) * rate % 1 < rate for j in range(10)])


def test_probes_first_then_the_largest_weighted_gain() -> None:
    # each draft token per row costs 30% of a step; B = 3
    policy = MarginalBenefitPolicy(SpecConfig(probe_weight=2.0), lambda b, g: 1.0 + 0.3 * g)
    curve = ((0.95, 0.9), (0.85, 0.85), (0.25, 0.3), (0.15, 0.1))  # acceptance grows with p
    for i in range(2000):
        policy.calibration.observe([p for p, _ in curve], [i * r % 1 < r for _, r in curve])
    cands = [
        Candidate("a", False, [0.95, 0.85, 0.85]),
        Candidate("b", False, [0.25]),
        Candidate("p", True, [0.15, 0.15]),
    ]
    grant = policy.allocate(3, cands)
    # order: p's probe token first (0.1), then a's nodes (~0.9, ~0.85, ~0.85), b (~0.3),
    # p's second (0.1 x 2 = 0.2 weighted); tokens per second (3 + sum a) / (1 + 0.3 n / 3)
    # peaks at n = 4, the probe's node and a's three
    assert grant == {"p": 1, "a": 3}


def test_budget_below_the_probes_means_no_drafts() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.3 * g)
    for i in range(2000):
        policy.calibration.observe([0.95, 0.15], [True, i % 10 == 0])
    # one probe token pays (2.9 / 1.15 > 2), two do not (3.0 / 1.3 < 2.52): budget 1 < 2
    assert policy.allocate(2, [Candidate("p0", True, [0.95]), Candidate("p1", True, [0.15])]) == {}


def test_calibration_learns_acceptance_per_probability_and_starts_pessimistic() -> None:
    cal = Calibration()
    assert cal.estimate(0.9) < 0.1  # nothing verified yet: trust the trees little
    for i in range(3000):
        cal.observe([0.15, 0.85], [i % 5 < 3, i % 5 < 2])  # 60% and 40% accepted
    assert cal.estimate(0.15) == pytest.approx(0.6, abs=0.03)
    assert cal.estimate(0.85) == pytest.approx(0.4, abs=0.03)
    # a bin nobody drafted borrows the pooled rate, less its uncertainty (then learns its own)
    assert 0.25 < cal.estimate(0.45) < cal.pooled
    # the estimate is a lower bound: a bin with a few lucky nodes is not trusted yet
    lucky = Calibration()
    lucky.observe([0.5, 0.5, 0.5], [True, True, True])
    assert lucky.estimate(0.5) < 0.5


def test_measured_calibration_turns_optimistic_trees_off() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.3 * g)
    cands = [Candidate("a", False, [0.9, 0.8])]
    trusted(policy, 0.9)
    assert policy.allocate(1, cands) == {"a": 2}
    for _ in range(3000):  # the trees promise 0.9 and 0.8; nothing is accepted any more
        policy.observe(2, 0, [0.9, 0.8], [False, False])
    assert policy.calibration.estimate(0.9) < 0.05
    assert policy.allocate(1, cands) == {}


def test_grants_never_exceed_g_max_or_the_draft() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(g_max=3), flat)
    trusted(policy, 0.9)
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


def test_exploration_keeps_a_switched_off_policy_measuring() -> None:
    """Early misses pin the calibration low; without exploration nothing is ever drafted
    again, so nothing is measured again and speculation stays off for good."""
    policy = MarginalBenefitPolicy(SpecConfig(explore_every=4), lambda b, g: 1.0 + 0.3 * g)
    cands = [Candidate("a", False, [0.9, 0.8])]
    for _ in range(200):
        policy.observe(2, 0, [0.9, 0.8], [False, False])
    grants = []
    for _ in range(8):  # the speculator asks can_pay once per engine step
        grants.append(policy.allocate(1, cands) if policy.can_pay(1) else {})
    assert grants == [{}, {}, {}, {"a": 1}] * 2  # every 4th step drafts the best node
    for _ in range(3000):  # the explored drafts now hold: the calibration recovers
        policy.observe(1, 1, [0.9], [True])
        policy.observe(1, 1, [0.8], [True])
    assert policy.can_pay(1) and policy.allocate(1, cands) == {"a": 2}


def test_exploration_drafts_an_eighth_of_the_batch() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(explore_every=1), steep)
    assert policy.can_pay(32)  # drafts never pay at this cost, but an exploration is due
    cands = [Candidate(f"r{i}", False, [0.5 - 0.01 * i, 0.1]) for i in range(32)]
    assert policy.allocate(32, cands) == {f"r{i}": 1 for i in range(4)}


def test_node_outcomes_follow_the_accepted_path_through_a_tree() -> None:
    # 5 -> 6 -> 8 and a sibling 7 of 5; the engine accepted 5, 6 (then a bonus token)
    draft = Draft((5, 7, 6, 8), (-1, -1, 0, 2))
    assert node_outcomes(draft, [5, 6]) == ([1, 1, 2, 3], [True, False, True, False])
    assert node_outcomes(draft, [7]) == ([1, 1, 2, 3], [False, True, False, False])
    assert node_outcomes(draft, []) == ([1, 1, 2, 3], [False] * 4)
    # a node's token matching at its depth is not enough: its parent must hold too
    assert node_outcomes(Draft((4, 6), (-1, 0)), [5, 6])[1] == [False, False]


def padded_cost(batch: int, g: int) -> float:
    """Every row's draft token costs half a step, priced at the step's longest draft."""
    return 1.0 + 0.5 * g


def test_a_padded_engine_gets_a_depth_not_a_few_deep_drafts() -> None:
    """16 rows, 8 with 2 trusted nodes and 8 with 8 (each accepted with chance a ~ 1):
    priced as an even spread, all 80 nodes pay ((16 + 80a) / T(16, 5) = 27.3 tokens per
    step-second against 23.9 with 2 each); on an engine that pads every row to the
    longest draft those 80 nodes cost T(16, 8), 5 steps (19.1), so the budget is the
    depth 2 (23.9; depth 1: 21.3, 3: 22.3), every row drafting 2."""
    short = [Candidate(f"s{i}", False, [0.9] * 2) for i in range(8)]
    long = [Candidate(f"l{i}", False, [0.9] * 8) for i in range(8)]
    spread = MarginalBenefitPolicy(SpecConfig(), padded_cost)
    padded = MarginalBenefitPolicy(SpecConfig(), padded_cost, padded=True)
    trusted(spread, 1.0)
    trusted(padded, 1.0)
    a = padded.calibration.estimate(0.9)
    assert a > 0.99
    grant = padded.allocate(16, short + long)
    assert grant == {c.request_id: 2 for c in short + long}
    uneven = spread.allocate(16, short + long)
    assert max(uneven.values()) == 8 and sum(uneven.values()) == 80

    def paid(g: dict[str, int]) -> float:  # tokens per second, priced as the engine pays
        return (16 + a * sum(g.values())) / padded_cost(16, max(g.values()))

    assert paid(grant) == pytest.approx(23.9, abs=0.1)
    assert paid(uneven) == pytest.approx(19.1, abs=0.1)


def test_a_padded_budget_skips_nodes_not_worth_one_and_drafting_that_does_not_pay() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), lambda b, g: 1.0 + 0.1 * g, padded=True)
    for i in range(3000):  # nodes at p >= 0.5 are accepted 90% of the time, below never
        policy.calibration.observe([0.95, 0.15], [i % 10 != 0, False])
    assert policy.calibration.estimate(0.15) < MIN_NODE_GAIN < policy.calibration.estimate(0.95)
    cands = [Candidate("a", False, [0.95, 0.95, 0.15]), Candidate("b", False, [0.15, 0.15])]
    # depth 2 or 3 prices alike up to 10%: b's nodes and a's third are not worth a node
    assert policy.allocate(2, cands) == {"a": 2}
    # every draft token costs a whole step: no depth pays, and nothing is due to explore
    costly = MarginalBenefitPolicy(SpecConfig(), steep, padded=True)
    trusted(costly, 0.9)
    assert costly.allocate(2, cands) == {}


# ---- measured step times: the budget turns speculation off where it does not pay ----------


def drive(
    policy: MarginalBenefitPolicy,
    steps: int,
    real_cost: Callable[[int, int], float],
    *,
    batch: int = 16,
    rate: float = 0.9,
) -> tuple[float, float]:
    """``steps`` decode steps of ``batch`` rows, each with a 4-node candidate, on an engine
    whose steps really take ``real_cost(B, depth)`` seconds (the profile the policy prices
    by may say otherwise) and whose nodes are accepted at ``rate`` (deterministically).
    Returns (throughput over that of plain steps, fraction of steps drafted)."""
    cands = [Candidate(f"r{i}", False, [0.85, 0.75, 0.65, 0.55]) for i in range(batch)]
    tokens = seconds = 0.0
    drafted = 0
    for step in range(steps):
        grant = policy.allocate(batch, cands) if policy.can_pay(batch) else {}
        made = batch
        for k, n in enumerate(grant[rid] for rid in sorted(grant)):
            ok = [((step * batch + k) * 7 + j) * rate % 1 < rate for j in range(n)]
            accepted = next((j for j, o in enumerate(ok) if not o), n)
            policy.observe(n, accepted, [0.85, 0.75, 0.65, 0.55][:n], ok)
            made += accepted
        took = real_cost(batch, max(grant.values(), default=0))
        policy.observe_step(batch, made, took)
        tokens += made
        seconds += took
        drafted += bool(grant)
    return tokens / seconds / (batch / real_cost(batch, 0)), drafted / steps


def cheap(batch: int, g: int) -> float:
    """What the profile says: a draft token costs 5% of a step (drafts pay)."""
    return 1.0 + 0.05 * g


def costly(batch: int, g: int) -> float:
    """What steps really take: each draft token 1.2 steps (drafts never pay)."""
    return 1.0 + 1.2 * g


def test_measured_steps_turn_drafts_off_where_verification_costs_more_than_it_saves() -> None:
    """The profile says drafts pay; the measured steps say they cost more than the tokens
    they add: the budget stops drafting (explorations back off to every 256 steps) and
    ends within 3% of no speculation."""
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    assert policy.allocate(16, [Candidate("a", False, [0.85] * 4)])  # predicted to pay
    first, _ = drive(policy, 100, costly)
    assert first < 1.0  # it drafted, measured, and lost while learning
    ratio, drafted = drive(policy, 3000, costly)
    assert ratio >= 0.97
    assert drafted < 0.01  # explorations only
    assert policy.explore_interval == SpecConfig().explore_every * MAX_EXPLORE_BACKOFF
    assert policy.measured.cost_factor > 10


def test_measured_steps_keep_drafts_that_pay() -> None:
    """Steps cost what the profile says and drafts are accepted: drafting stays on and
    the measured cost factor stays 1."""
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    ratio, drafted = drive(policy, 1000, cheap)
    assert ratio > 1.5
    assert drafted > 0.99
    assert policy.measured.cost_factor == pytest.approx(1.0, abs=0.01)


def test_a_machine_that_slows_down_alike_does_not_switch_drafts_off() -> None:
    """Every step 1.8x slower than profiled (load on the host): plain steps measure it,
    so drafted steps are weighed against plain ones measured alike, and drafts stay on."""
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    drive(policy, 50, lambda b, g: 1.8)  # plain-speed steps, measured 1.8x the profile
    ratio, drafted = drive(policy, 1000, lambda b, g: 1.8 * cheap(b, g))
    assert ratio > 1.5 and drafted > 0.99


def test_switched_off_drafts_recover_when_verification_gets_cheap() -> None:
    """Off after costly steps; then steps cost what the profile says (another load on
    the host, a longer context): explorations measure drafts paying and the budget
    drafts again within a few hundred steps."""
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    drive(policy, 2000, costly)
    _, drafted = drive(policy, 300, costly)
    assert drafted < 0.02
    drive(policy, 1000, cheap)
    ratio, drafted = drive(policy, 500, cheap)
    assert drafted > 0.95 and ratio > 1.5
    assert policy.explore_interval == SpecConfig().explore_every


def test_an_unpadded_budget_reads_the_measured_steps_too() -> None:
    policy = MarginalBenefitPolicy(SpecConfig(), cheap)
    trusted(policy, 0.9)
    ratio, drafted = drive(policy, 3000, costly)
    assert ratio >= 0.97 and drafted < 0.01
    drive(policy, 1000, cheap)
    ratio, drafted = drive(policy, 500, cheap)
    assert drafted > 0.95 and ratio > 1.5


def test_measured_cost_weighs_drafted_steps_against_plain_ones() -> None:
    cost = MeasuredCost(prior_steps=1.0)
    assert cost.cost_factor == 1.0 and cost.base == 1.0
    assert cost.price([1.0, 1.1, 1.2]) == [1.0, 1.1, 1.2]
    for _ in range(200):
        cost.plain(2.0, 1.0)  # the machine runs at half the profile's speed
    assert cost.base == pytest.approx(2.0, abs=1e-3)
    # 1.5 tokens per row in 3 s where a plain step takes 2 s: a speed-up of 1.0, and an
    # extra of half a step where the profile said 10%
    assert cost.drafted(1.5, 3.0, 1.0, 1.1) == pytest.approx(1.0, abs=1e-3)
    cost.drafted(1.5, 0.0, 1.0, 1.1)  # nothing measured: ignored
    assert cost.num_drafted == 1
    for _ in range(100):
        cost.drafted(1.5, 3.0, 1.0, 1.1)
    assert cost.cost_factor == pytest.approx(5.0, abs=1e-3)
    assert cost.price([1.0, 1.1, 1.0]) == pytest.approx([1.0, 1.5, 1.0 + 5 * MIN_EXTRA])
    with pytest.raises(ValueError, match="decays"):
        MeasuredCost(decay=1.5)
