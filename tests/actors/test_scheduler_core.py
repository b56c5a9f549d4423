"""SchedulerCore: capacity, chunking, results (ok / stale / unknown), failures, liveness."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.scheduler import (
    POLICY_NAMES,
    Dispatch,
    InstanceLoad,
    RequestState,
    SchedulerCore,
    UnknownRequestError,
    make_policy,
)

LIMIT = 64


def group(gid: str, size: int, first_arrival: int, prompt_len: int = 8) -> list[RequestState]:
    return [
        RequestState(
            request_id=f"{gid}-{i}",
            group_id=gid,
            is_probe=i == 0,
            prompt_len=prompt_len,
            max_new_tokens=LIMIT,
            arrival=first_arrival + i,
        )
        for i in range(size)
    ]


def core_for(name: str, num_instances: int = 2, **kw: int | float) -> SchedulerCore:
    true = {f"g{g}-{i}": LIMIT for g in range(20) for i in range(8)}
    policy = make_policy(name, num_instances=num_instances, max_new_tokens=LIMIT, true_lengths=true)
    opts: dict[str, int | float] = {"chunk_size": 16, "max_running_per_instance": 2} | kw
    return SchedulerCore(policy, num_instances, **opts)  # type: ignore[arg-type]


def test_chunked_respects_slots_and_chunk_size() -> None:
    core = core_for("divided")
    core.add(group("g0", 4, 0) + group("g1", 4, 4), now=0.0)
    ds = core.next_dispatches(0.0)
    assert len(ds) == 4 and core.next_dispatches(0.0) == []
    assert sorted(d.instance for d in ds) == [0, 0, 1, 1]
    assert {d.max_chunk_tokens for d in ds} == {16}
    assert core.num_running == 4 and core.num_waiting == 4 and core.counters["dispatches"] == 4
    assert core.on_chunk_finished(ds[0].request_id, ds[0].instance, 1, 16, False, 1.0) == "ok"
    [d] = core.next_dispatches(1.0)
    assert d.instance == ds[0].instance  # the freed slot; FIFO: the oldest waiting request


def test_last_chunk_is_clipped_to_the_generation_limit() -> None:
    core = core_for("divided", chunk_size=48)
    core.add(group("g0", 1, 0), now=0.0)
    [d] = core.next_dispatches(0.0)
    core.on_chunk_finished(d.request_id, d.instance, d.chunk_seq, 48, False, 1.0)
    [d] = core.next_dispatches(1.0)
    assert (d.max_chunk_tokens, d.chunk_seq, core.counters["chunks_moved"]) == (LIMIT - 48, 2, 0)
    core.on_chunk_finished(d.request_id, d.instance, d.chunk_seq, LIMIT - 48, False, 2.0)
    assert core.is_done and core.request(d.request_id).generated == LIMIT  # limit reached


def test_working_set_admission_reserves_kv_for_growth() -> None:
    core = core_for("divided", num_instances=1, max_running_per_instance=8)
    core.growth_reserve = 16
    core.update_load(
        InstanceLoad(
            index=0,
            num_running=0,
            num_waiting=0,
            kv_tokens_used=0,
            kv_tokens_total=100,
            max_running=8,
        )
    )
    core.add(group("g0", 4, 0), now=0.0)  # prompts of 8, chunks of 16 reserved per member
    # members k: 8k contexts + 16k reserve <= 90  ->  k = 3
    assert len(core.next_dispatches(0.0)) == 3
    assert core.working_set(0) == (3, 24)
    d = core.request("g0-0")
    core.on_chunk_finished("g0-0", 0, d.chunk_seq, 16, False, 1.0)
    assert core.working_set(0) == (3, 40)  # its context grew; it stays in the set
    assert [x.request_id for x in core.next_dispatches(1.0)] == ["g0-0"]  # home, not g0-3


def test_an_empty_working_set_takes_one_request_whatever_its_size() -> None:
    core = core_for("divided", num_instances=1, max_running_per_instance=8)
    core.update_load(
        InstanceLoad(
            index=0,
            num_running=0,
            num_waiting=0,
            kv_tokens_used=95,
            kv_tokens_total=10,
            max_running=8,
        )
    )
    core.add(group("g0", 2, 0), now=0.0)
    assert len(core.next_dispatches(0.0)) == 1  # no stall; one at a time


def test_baseline_pins_groups_and_runs_to_completion_unbounded() -> None:
    core = core_for("baseline", max_running_per_instance=1)
    core.update_load(
        InstanceLoad(
            index=0,
            num_running=0,
            num_waiting=0,
            kv_tokens_used=99,
            kv_tokens_total=100,
            max_running=1,
        )
    )
    core.add(group("g0", 3, 0) + group("g1", 3, 3) + group("g2", 2, 6), now=0.0)
    ds = core.next_dispatches(0.0)
    assert len(ds) == 8  # every request at once: the engine queues and preempts
    assert {d.request_id: d.instance for d in ds} == {
        **dict.fromkeys(["g0-0", "g0-1", "g0-2", "g2-0", "g2-1"], 0),
        **dict.fromkeys(["g1-0", "g1-1", "g1-2"], 1),
    }
    assert {d.max_chunk_tokens for d in ds} == {LIMIT}


def test_results_stale_duplicate_unknown() -> None:
    core = core_for("divided")
    core.add(group("g0", 1, 0), now=0.0)
    [d] = core.next_dispatches(0.0)
    with pytest.raises(UnknownRequestError, match="never added"):
        core.on_chunk_finished("nope", 0, 1, 1, False, 1.0)
    assert core.on_chunk_finished(d.request_id, d.instance, 99, 16, False, 1.0) == "stale"
    assert core.on_chunk_finished(d.request_id, 1 - d.instance, 1, 16, False, 1.0) == "stale"
    assert core.on_chunk_finished(d.request_id, d.instance, 1, 16, False, 1.0) == "ok"
    assert core.on_chunk_finished(d.request_id, d.instance, 1, 16, False, 1.0) == "stale"
    assert core.counters["stale_results"] == 3 and core.request(d.request_id).generated == 16
    with pytest.raises(ValueError, match="duplicate request id"):
        core.add(group("g0", 1, 5), now=2.0)


def test_affinity_and_chunks_moved() -> None:
    core = core_for("divided", max_running_per_instance=4, affinity_spread=1)
    core.add(group("g0", 2, 0), now=0.0)
    a, b = core.next_dispatches(0.0)
    assert (a.instance, b.instance) == (0, 1)
    core.on_chunk_finished(a.request_id, 0, a.chunk_seq, 16, False, 1.0)
    [a2] = core.next_dispatches(1.0)
    assert a2.instance == 0 and core.counters["chunks_moved"] == 0  # KV is still there
    core.add(group("g1", 6, 2), now=1.0)
    assert len(core.next_dispatches(1.0)) == 6  # alternating: 4 in flight on each instance
    core.on_chunk_finished(b.request_id, 1, b.chunk_seq, 16, False, 2.0)  # 1: 3 in flight
    on_0 = [f"g1-{i}" for i in range(6) if core.request(f"g1-{i}").instance == 0]
    assert len(on_0) == 3
    for rid in on_0:  # finish the three g1 chunks on instance 0: 1 in flight there
        core.on_chunk_finished(rid, 0, 1, 16, True, 3.0)
    [d] = core.next_dispatches(3.0)
    assert (d.request_id, d.instance) == (b.request_id, 0)  # 3 - 1 > spread 1: b moves
    assert core.counters["chunks_moved"] == 1


def test_requeue_instance() -> None:
    core = core_for("divided")
    core.add(group("g0", 4, 0), now=0.0)
    ds = core.next_dispatches(0.0)
    on_1 = sorted(d.request_id for d in ds if d.instance == 1)
    assert core.requeue_instance(1, 1.0, mark_down=True) == on_1
    assert all(core.request(r).status == "waiting" for r in on_1)
    old = next(d for d in ds if d.instance == 1)
    assert core.on_chunk_finished(old.request_id, 1, old.chunk_seq, 16, False, 1.0) == "stale"
    assert core.next_dispatches(1.0) == []  # instance 0 full, instance 1 down
    core.update_load(
        InstanceLoad(
            index=1,
            num_running=0,
            num_waiting=0,
            kv_tokens_used=0,
            kv_tokens_total=999,
            max_running=2,
        )
    )
    assert sorted(d.request_id for d in core.next_dispatches(1.0)) == on_1


def test_starvation_picks_counted() -> None:
    core = core_for("context_aware", num_instances=1, max_running_per_instance=4)
    core.add(group("g0", 3, 0), now=0.0)
    for d in core.next_dispatches(0.0):
        core.on_chunk_finished(d.request_id, 0, d.chunk_seq, 16, False, 1.0)
    core.add(group("g1", 3, 3), now=1.0)
    # g0's members ran a chunk, then waited 9 s > 5 s: the oldest is promoted ahead of the
    # fresh probe g1-0 (which has generated less, so it would go first by rank)
    got = [d.request_id for d in core.next_dispatches(10.0)]
    assert got == ["g0-0", "g1-0", "g0-1", "g0-2"]
    assert core.counters["starvation_picks"] == 1


def test_working_set_is_capped_per_instance() -> None:
    core = core_for("divided", num_instances=1, max_running_per_instance=2)
    core.add(group("g0", 3, 0), now=0.0)
    a, _ = core.next_dispatches(0.0)
    core.on_chunk_finished(a.request_id, 0, a.chunk_seq, 16, False, 1.0)
    # a is parked (its KV stays on the instance): g0-2 may not start and evict it
    assert [d.request_id for d in core.next_dispatches(1.0)] == [a.request_id]


@dataclass
class Sim:
    """Generators in miniature: which chunk each instance runs, and the true lengths."""

    core: SchedulerCore
    true_len: dict[str, int]
    in_flight: dict[str, Dispatch] = field(default_factory=dict)
    old: list[Dispatch] = field(default_factory=list)  # already answered or abandoned
    finished: list[str] = field(default_factory=list)
    now: float = 0.0

    def dispatch(self) -> None:
        core = self.core
        for d in core.next_dispatches(self.now):
            assert d.request_id not in self.in_flight, "dispatched twice"
            assert d.request_id not in self.finished, "finished request dispatched"
            assert d.max_chunk_tokens >= 1
            if core.policy.chunked:
                assert d.max_chunk_tokens <= core.chunk_size
            self.in_flight[d.request_id] = d
            load = core.projected_load(d.instance)
            if core.policy.bounded_by_capacity:
                assert load.num_running <= core.max_running_per_instance
                members, _ = core.working_set(load.index)
                assert members <= load.max_running

    def answer(self, rid: str) -> None:
        d = self.in_flight.pop(rid)
        r = self.core.request(rid)
        n = min(d.max_chunk_tokens, self.true_len[rid] - r.generated)
        done = r.generated + n >= self.true_len[rid]
        assert self.core.on_chunk_finished(rid, d.instance, d.chunk_seq, n, done, self.now) == "ok"
        self.old.append(d)
        if self.core.request(rid).status == "finished":
            self.finished.append(rid)

    def kill(self, instance: int) -> None:
        lost = self.core.requeue_instance(instance, self.now)
        assert sorted(lost) == sorted(
            r for r, d in self.in_flight.items() if d.instance == instance
        )
        for rid in lost:
            self.old.append(self.in_flight.pop(rid))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(POLICY_NAMES),
    num_instances=st.integers(1, 3),
    max_running=st.integers(1, 4),
    chunk_size=st.integers(1, 40),
    lengths=st.lists(st.integers(1, LIMIT), min_size=1, max_size=24),
    data=st.data(),
)
def test_random_runs_respect_capacity_and_finish(
    policy: str,
    num_instances: int,
    max_running: int,
    chunk_size: int,
    lengths: list[int],
    data: st.DataObject,
) -> None:
    reqs = [
        RequestState(
            request_id=f"r{i}",
            group_id=f"g{i // 4}",
            is_probe=i % 4 == 0,
            prompt_len=data.draw(st.integers(1, 50)),
            max_new_tokens=LIMIT,
            arrival=i,
        )
        for i in range(len(lengths))
    ]
    true_len = {r.request_id: n for r, n in zip(reqs, lengths, strict=True)}
    pol = make_policy(
        policy, num_instances=num_instances, max_new_tokens=LIMIT, true_lengths=true_len
    )
    core = SchedulerCore(
        pol, num_instances, chunk_size=chunk_size, max_running_per_instance=max_running
    )
    sim = Sim(core, true_len)
    pending = list(reqs)
    for _ in range(data.draw(st.integers(0, 60))):
        sim.now += data.draw(st.floats(0.0, 3.0))
        op = data.draw(st.sampled_from(["add", "dispatch", "answer", "load", "kill", "stale"]))
        if op == "add" and pending:
            k = data.draw(st.integers(1, len(pending)))
            core.add(pending[:k], sim.now)
            del pending[:k]
        elif op == "dispatch":
            sim.dispatch()
        elif op == "answer" and sim.in_flight:
            sim.answer(data.draw(st.sampled_from(sorted(sim.in_flight))))
        elif op == "load":
            i, total = data.draw(st.integers(0, num_instances - 1)), data.draw(st.integers(1, 500))
            used = data.draw(st.integers(0, total))
            core.update_load(
                InstanceLoad(
                    index=i,
                    num_running=0,
                    num_waiting=0,
                    kv_tokens_used=used,
                    kv_tokens_total=total,
                    max_running=4,
                )
            )
        elif op == "kill":
            sim.kill(data.draw(st.integers(0, num_instances - 1)))
        elif op == "stale" and sim.old:
            d = data.draw(st.sampled_from(sim.old))
            assert (
                core.on_chunk_finished(d.request_id, d.instance, d.chunk_seq, 1, True, 0) == "stale"
            )
    core.add(pending, sim.now)
    for _ in range(10_000):  # liveness: with results coming back, everything finishes
        if core.is_done:
            break
        sim.now += 0.5
        sim.dispatch()
        assert sim.in_flight, "stalled: nothing in flight and not done"
        sim.answer(min(sim.in_flight))
    assert core.is_done and sorted(sim.finished) == sorted(true_len)
    assert all(core.request(r).generated == n for r, n in true_len.items())
    assert core.num_waiting == core.num_running == 0


def test_first_estimates_record_what_ordered_each_request() -> None:
    core = core_for("context_aware", num_instances=1, max_running_per_instance=3)
    core.update_estimate("g0", 40)  # a prior, before the group arrives
    core.add(group("g0", 2, 0) + group("g1", 2, 2), now=0.0)
    ds = core.next_dispatches(0.0)  # both probes, then g0's sibling (40 < the limit, but known)
    assert [d.request_id for d in ds] == ["g0-0", "g1-0", "g1-1"]
    assert core.first_estimates == {"g1-1": LIMIT}  # probes carry none; g1 had no estimate
    core.on_chunk_finished("g0-0", 0, 1, 16, True, 1.0)
    core.update_estimate("g0", 50)
    [d] = core.next_dispatches(1.0)
    assert d.request_id == "g0-1" and core.first_estimates["g0-1"] == 50
    divided = core_for("divided")
    divided.add(group("g0", 2, 0), now=0.0)
    divided.next_dispatches(0.0)
    assert divided.first_estimates == {}  # a policy with no estimate records none
