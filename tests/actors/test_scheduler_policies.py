"""Scheduling policies and placement, as pure functions of their inputs."""

from __future__ import annotations

import pytest

from actors.scheduler import (
    POLICY_NAMES,
    ContextAware,
    Divided,
    GroupRoundRobin,
    InstanceLoad,
    Oracle,
    ProjectedLoad,
    RequestState,
    make_policy,
    select_instance,
)


def req(
    rid: str,
    group: str = "g",
    *,
    probe: bool = False,
    arrival: int = 0,
    generated: int = 0,
    enqueued_at: float = 0.0,
    kv_instance: int | None = None,
) -> RequestState:
    return RequestState(
        request_id=rid,
        group_id=group,
        is_probe=probe,
        prompt_len=10,
        max_new_tokens=1000,
        arrival=arrival,
        generated=generated,
        enqueued_at=enqueued_at,
        kv_instance=kv_instance,
    )


def ids(rs: object) -> list[str]:
    return [r.request_id for r in rs]  # type: ignore[attr-defined]


def test_probes_first_fewest_generated_first() -> None:
    policy = ContextAware(max_new_tokens=1000)
    waiting = [
        req("a", "g1", arrival=0),
        req("p1", "g1", probe=True, arrival=1, generated=30),
        req("p2", "g2", probe=True, arrival=2, generated=10),
        req("p3", "g3", probe=True, arrival=3, generated=20),
        req("b", "g2", arrival=4),
    ]
    assert ids(policy.order(waiting, now=0.0)) == ["p2", "p3", "p1", "a", "b"]


def test_rest_longest_estimate_first_ties_fifo() -> None:
    policy = ContextAware(max_new_tokens=1000)
    policy.update_estimate("short", 100)
    policy.update_estimate("mid", 300)
    waiting = [
        req("s", "short", arrival=0),
        req("m2", "mid", arrival=2, enqueued_at=2.0),
        req("m1", "mid", arrival=1, enqueued_at=1.0),
        req("u", "unknown", arrival=3, enqueued_at=3.0),  # no estimate yet: generation limit
    ]
    assert ids(policy.order(waiting, now=3.0)) == ["u", "m1", "m2", "s"]


def test_long_band_serves_the_longest_groups_fifo_and_the_rest_longest_first() -> None:
    strict, banded = ContextAware(1000), ContextAware(1000, long_band=2.0)
    for policy in (strict, banded):
        for group, estimate in (("a", 600), ("b", 900), ("c", 500), ("d", 499), ("e", 100)):
            policy.update_estimate(group, estimate)
    waiting = [
        req("e", "e", arrival=0, enqueued_at=0.0),
        req("d", "d", arrival=1, enqueued_at=1.0),
        req("c", "c", arrival=2, enqueued_at=2.0),
        req("b", "b", arrival=3, enqueued_at=3.0),
        req("a", "a", arrival=4, enqueued_at=4.0),
        req("u", "unknown", arrival=5, enqueued_at=5.0),  # the limit: in the band
        req("p", "e", probe=True, arrival=6, enqueued_at=6.0),  # probes still first
    ]
    assert ids(strict.order(waiting, now=6.0)) == ["p", "u", "b", "a", "c", "d", "e"]
    # estimates >= 1000 / 2 share the top rank, in FIFO order by re-entry; then 499, 100
    assert ids(banded.order(waiting, now=6.0)) == ["p", "c", "b", "a", "u", "d", "e"]
    assert banded.estimate("c") == 500  # the band changes the order, not the estimate
    with pytest.raises(ValueError, match="long_band must be >= 1"):
        ContextAware(1000, long_band=0.5)
    made = make_policy("context_aware", num_instances=2, max_new_tokens=8, long_band=3.0)
    assert isinstance(made, ContextAware) and made.long_band == 3.0


def test_probe_first_rules_put_a_probe_ahead_by_what_its_group_knows() -> None:
    rules = ("always", "unless_prior", "unknown", "never")
    policies = {rule: ContextAware(1000, long_band=2.0, probe_first=rule) for rule in rules}
    waiting = [
        req("a", "long", arrival=0, enqueued_at=0.0),
        req("s", "short", arrival=1, enqueued_at=1.0),
        req("p_short", "short", probe=True, arrival=2, enqueued_at=2.0),
        req("p_new", "new", probe=True, arrival=3, enqueued_at=3.0, generated=50),
        req("p_long", "long", probe=True, arrival=4, enqueued_at=4.0),
    ]
    for policy in policies.values():
        policy.update_estimate("long", 900)  # before any request of it ran: a prior
        policy.remove(req("s0", "short"))  # a sibling ran, then finished short
        policy.update_estimate("short", 100)
    order = {rule: ids(p.order(waiting, now=4.0)) for rule, p in policies.items()}
    assert order["always"] == ["p_short", "p_long", "p_new", "a", "s"]  # Seer's
    # a probe not put ahead ranks as its siblings do (the long band FIFO by re-entry,
    # then the short group): the prior's group's probe under "unless_prior", every
    # estimated group's under "unknown", every probe under "never"
    assert order["unless_prior"] == ["p_short", "p_new", "a", "p_long", "s"]
    assert order["unknown"] == ["p_new", "a", "p_long", "s", "p_short"]
    assert order["never"] == ["a", "p_new", "p_long", "s", "p_short"]
    unknown = policies["unknown"]
    assert unknown.is_probe_first(waiting[3]) and not unknown.is_probe_first(waiting[4])
    unknown.update_estimate("new", 120)  # its first sibling finished
    assert ids(unknown.order(waiting, now=4.0)) == ["a", "p_long", "p_new", "s", "p_short"]
    with pytest.raises(ValueError, match="probe_first must be one of"):
        ContextAware(1000, probe_first="sometimes")
    made = make_policy("context_aware", num_instances=2, max_new_tokens=8, probe_first="never")
    assert isinstance(made, ContextAware) and made.probe_first == "never"


def test_finished_sibling_estimate_changes_order() -> None:
    policy = ContextAware(max_new_tokens=1000)
    waiting = [req("a", "ga", arrival=0), req("b", "gb", arrival=1)]
    assert ids(policy.order(waiting, now=0.0)) == ["a", "b"]
    policy.update_estimate("ga", 50)  # a sibling of "a" finished early: its group is short
    assert ids(policy.order(waiting, now=0.0)) == ["b", "a"]
    assert policy.estimate("ga") == 50 and policy.estimate("gb") == 1000


def test_anti_starvation_goes_first() -> None:
    policy = ContextAware(max_new_tokens=1000, starvation_s=5.0)
    policy.update_estimate("short", 10)
    old = req("old", "short", arrival=0, enqueued_at=0.0)
    old.chunk_seq = 1  # it ran a chunk, then waited
    unstarted = req("new", "short", arrival=2, enqueued_at=0.0)
    probe = req("p", "other", probe=True, arrival=1, enqueued_at=4.0)
    assert policy.starved([probe, old, unstarted], now=5.0) == []  # exactly 5 s: not yet
    assert ids(policy.starved([probe, old, unstarted], now=5.5)) == ["old"]
    assert ids(policy.order([probe, old], now=5.5)) == ["p", "old"]  # order itself: by rank
    assert policy.is_starved(old, 5.5) and not policy.is_starved(probe, 5.5)
    assert not policy.is_starved(unstarted, 100.0)  # never ran: never starved


def test_divided_fifo_by_reentry() -> None:
    policy = Divided()
    assert policy.chunked and policy.bounded_by_capacity
    back = req("back", arrival=0, enqueued_at=9.0, generated=64)  # returned from a chunk
    new = req("new", arrival=5, enqueued_at=1.0)
    assert ids(policy.order([back, new], now=9.0)) == ["new", "back"]


def test_oracle_longest_remaining_first() -> None:
    policy = Oracle({"a": 100, "b": 500, "c": 300})
    waiting = [req("a", arrival=1), req("b", arrival=0, generated=400), req("c", arrival=2)]
    for r in waiting:
        policy.add(r)
    assert ids(policy.order(waiting, now=0.0)) == ["c", "b", "a"]  # remaining 300, 100 (ties FIFO)
    with pytest.raises(KeyError, match="no true length"):
        policy.add(req("z"))


def test_baseline_pins_groups_round_robin_by_first_arrival() -> None:
    policy = GroupRoundRobin(num_instances=2)
    assert not policy.chunked and not policy.bounded_by_capacity
    rs = [
        req(f"{g}{i}", g, arrival=n)
        for n, (g, i) in enumerate([("x", 0), ("y", 0), ("x", 1), ("z", 0), ("y", 1), ("w", 0)])
    ]
    for r in rs:
        policy.add(r)
    assert {r.request_id: policy.pin(r) for r in rs} == {
        "x0": 0,
        "y0": 1,
        "x1": 0,
        "z0": 0,
        "y1": 1,
        "w0": 1,
    }
    assert ids(policy.order(list(reversed(rs)), now=0.0)) == ids(rs)


def test_make_policy() -> None:
    assert [
        make_policy(n, num_instances=2, max_new_tokens=8, true_lengths={}).name
        for n in POLICY_NAMES
    ] == list(POLICY_NAMES)
    with pytest.raises(ValueError, match="baseline, divided, context_aware, oracle"):
        make_policy("fastest", num_instances=2, max_new_tokens=8)
    with pytest.raises(ValueError, match="true_lengths"):
        make_policy("oracle", num_instances=2, max_new_tokens=8)


def load(
    index: int, running: int, kv_tokens_used: int = 0, kv_tokens_total: int = 1000
) -> ProjectedLoad:
    return ProjectedLoad(
        index=index,
        num_running=running,
        kv_tokens_used=kv_tokens_used,
        kv_tokens_total=kv_tokens_total,
        max_running=8,
    )


def test_placement_prefers_kv_instance_within_spread() -> None:
    r = req("a", kv_instance=1)
    loads = [load(0, 1), load(1, 5), load(2, 3)]
    assert select_instance(r, loads, affinity_spread=4) == 1  # 5 - 1 <= 4
    assert select_instance(r, loads, affinity_spread=3) == 0  # spread too large: least loaded
    assert select_instance(req("b"), loads, affinity_spread=4) == 0


def test_placement_waits_for_a_full_kv_instance_unless_the_spread_is_passed() -> None:
    r = req("a", kv_instance=1)
    loads = [load(0, 2), load(1, 8)]  # instance 1 has no free slot
    assert select_instance(r, loads, affinity_spread=100) is None  # wait: no re-prefill
    assert select_instance(r, loads, affinity_spread=4) == 0  # imbalance: move
    loads = [load(0, 2), load(1, 2, kv_tokens_used=950)]  # instance 1's KV is full
    assert (
        select_instance(r, loads, affinity_spread=100, kv_need=100, kv_high_watermark=0.9) is None
    )
    assert select_instance(req("b"), loads, 100, kv_need=100, kv_high_watermark=0.9) == 0


def test_placement_least_loaded_tie_breaks() -> None:
    loads = [
        load(0, 2, kv_tokens_used=500),
        load(1, 2, kv_tokens_used=100),
        load(2, 2, kv_tokens_used=100),
    ]
    assert select_instance(req("a"), loads, affinity_spread=0) == 1  # lower KV, lower index
    loads = [load(0, 3, kv_tokens_used=0), load(1, 2, kv_tokens_used=900)]
    assert select_instance(req("a"), loads, affinity_spread=0) == 1  # in-flight count first


def test_placement_none_without_capacity_idle_always_fits() -> None:
    full = [load(0, 8), load(1, 1, kv_tokens_used=900)]
    assert select_instance(req("a"), full, 4, kv_need=200, kv_high_watermark=0.9) is None
    idle = [load(0, 0, kv_tokens_used=990)]  # parked KV only: an idle instance always takes one
    assert select_instance(req("a"), idle, 4, kv_need=5000, kv_high_watermark=0.9) == 0
    assert select_instance(req("a"), full, 4, check_capacity=False) == 1


def test_placement_accepts_telemetry() -> None:
    loads = [
        InstanceLoad(
            index=0,
            num_running=4,
            num_waiting=0,
            kv_tokens_used=10,
            kv_tokens_total=100,
            max_running=4,
        ),
        InstanceLoad(
            index=1,
            num_running=3,
            num_waiting=0,
            kv_tokens_used=10,
            kv_tokens_total=100,
            max_running=4,
        ),
    ]
    assert select_instance(req("a", kv_instance=0), loads, affinity_spread=4) is None
    assert select_instance(req("a", kv_instance=0), loads, affinity_spread=0) == 1
