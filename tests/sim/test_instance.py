"""SimInstance: the built-in engine's KV books -- admission, parking, eviction, preemption."""

from __future__ import annotations

import pytest

from pipeline.sim.costmodel import CostModel
from pipeline.sim.instance import Chunk, SimInstance

COST = CostModel.builtin("qwen2.5-7b")


def chunk(request: int, ctx: int, target: int, *, new: bool = True, seq: int = 1) -> Chunk:
    return Chunk(
        request=request,
        chunk_seq=seq,
        ctx=float(ctx),
        target=float(target),
        finishes=True,
        dispatched_s=0.0,
        new_ctx=new,
    )


def drain(inst: SimInstance, now: float = 0.0) -> tuple[list[Chunk], float]:
    done: list[Chunk] = []
    end = inst.plan(now)
    while end is not None:
        done += inst.finish()
        now = end
        end = inst.plan(now)
    return done, now


def test_preempts_the_newest_admission_and_recomputes_it() -> None:
    inst = SimInstance(0, COST, max_batch=4, kv_capacity=100)
    inst.enqueue(chunk(0, 30, 30))
    inst.enqueue(chunk(1, 30, 30))
    # both fit (60 of 100); the first step prefills them, each later one writes 2 tokens
    inst.plan(0.0)
    assert len(inst.running) == 2 and inst.seg_steps == 21  # then the KV is full
    inst.finish()
    inst.plan(1.0)
    assert inst.counts["num_preemptions"] == 1 and inst.counts["num_recomputed_tokens"] == 0
    assert [c.request for c in inst.running] == [0] and inst.waiting[0].request == 1
    done, _ = drain(inst, 1.0)
    assert sorted(c.request for c in done) == [0, 1]
    assert all(c.done == c.target for c in done)
    # request 1 was re-admitted from scratch once 0 had finished: its context (30 + 21
    # tokens) recomputed
    assert inst.counts["num_recomputed_tokens"] == 51
    assert inst.kv_used() == 0  # finished requests free their KV


def test_alone_and_out_of_kv_ends_the_request() -> None:
    inst = SimInstance(0, COST, max_batch=4, kv_capacity=50)
    inst.enqueue(chunk(0, 40, 100))
    done, _ = drain(inst)
    # the prefill samples a token with 40 tokens of KV; 10 decode steps fill the other 10
    assert len(done) == 1 and done[0].out_of_kv and done[0].done == pytest.approx(11)


def test_local_pool_parks_kv_and_reuses_it_only_on_the_same_instance() -> None:
    a = SimInstance(0, COST, max_batch=4, kv_capacity=1000)
    b = SimInstance(1, COST, max_batch=4, kv_capacity=1000)
    first = chunk(0, 10, 5)
    first.finishes = False
    drain(a)
    a.enqueue(first)
    drain(a)
    # the chunk ended; its KV waits here (all but the last token sampled, as the engine's)
    assert a.parked == {0: 14.0}
    a.enqueue(chunk(0, 15, 5, new=False, seq=2))
    drain(a)
    assert a.counts["num_reprefilled_tokens"] == 0
    b.enqueue(chunk(0, 15, 5, new=False, seq=2))
    drain(b)
    assert b.counts["num_reprefilled_tokens"] == 15  # moved: its context is prefilled again


def test_global_pool_moves_without_reprefill() -> None:
    b = SimInstance(1, COST, max_batch=4, kv_capacity=1000, kv_pool="global")
    b.enqueue(chunk(0, 15, 5, new=False, seq=2))
    drain(b)
    assert b.counts["num_reprefilled_tokens"] == 0 and not b.parked


def test_parked_kv_is_evicted_least_recently_used_before_admission_waits() -> None:
    inst = SimInstance(0, COST, max_batch=4, kv_capacity=100)
    inst.parked.update({7: 40.0, 8: 40.0})
    inst.enqueue(chunk(0, 50, 1))
    inst.plan(0.0)
    assert list(inst.parked) == [8] and inst.counts["num_parked_evictions"] == 1


def test_a_queued_requests_parked_kv_goes_last_and_the_last_queued_first() -> None:
    """The engine's rule (tests/actors/test_engine_chunks.py, the same case): four chunks'
    KV parked, their next chunks queued behind a new request that needs room; the queued
    request that runs last gives its KV, the other three resume theirs."""
    inst = SimInstance(0, COST, max_batch=8, kv_capacity=55)
    inst.parked.update({r: 9.0 for r in range(4)})
    inst.parked[9] = 5.0  # not queued: goes first, though parked last
    inst.enqueue(chunk(4, 20, 1))
    for r in range(4):
        inst.enqueue(chunk(r, 10, 2, new=False, seq=2))
    drain(inst)
    assert inst.counts["num_parked_evictions"] == 2
    assert inst.counts["num_reprefilled_tokens"] == 10  # request 3's whole context
    assert inst.counts["num_preemptions"] == 0
    inst = SimInstance(0, COST, max_batch=8, kv_capacity=40)
    inst.parked.update({r: 9.0 for r in range(4)})
    inst.enqueue(chunk(4, 10, 1))
    inst.enqueue(chunk(0, 10, 2, new=False, seq=2))
    inst.plan(0.0)  # needs 10 of the 36 parked: not the LRU (0, queued) but 1
    assert list(inst.parked) == [2, 3] and len(inst.running) == 2


def test_cut_ends_the_stretch_after_the_step_in_flight() -> None:
    inst = SimInstance(0, COST, max_batch=4, kv_capacity=10_000, max_steps=100)
    inst.enqueue(chunk(0, 10, 1000))
    end = inst.plan(0.0)
    assert end is not None and inst.seg_steps == 100
    dt = inst.seg_dt
    t = inst.seg_prefill + 2.5 * dt
    assert inst.cut(t) == pytest.approx(inst.seg_prefill + 3 * dt)
    [c] = inst.running
    inst.finish()
    assert c.done == 3


def test_overhead_outside_the_engine_lengthens_each_step_and_follows_each_report() -> None:
    plain = SimInstance(0, COST, max_batch=4, kv_capacity=10_000, max_steps=100)
    slow = SimInstance(
        0, COST, max_batch=4, kv_capacity=10_000, max_steps=100, step_overhead_s=1e-3, report_s=5e-3
    )
    for inst in (plain, slow):
        inst.enqueue(chunk(0, 10, 40))
        inst.enqueue(chunk(1, 10, 80))
    first = plain.plan(0.0), slow.plan(0.0)
    assert first[0] is not None and first[1] is not None
    assert first[1] - first[0] == pytest.approx(40 * 1e-3)  # 40 steps, 1 ms more each
    plain.finish(), slow.finish()  # request 0 ends: its report delays the next stretch
    second = plain.plan(first[0]), slow.plan(first[1])
    assert second[0] is not None and second[1] is not None
    assert (second[1] - first[1]) - (second[0] - first[0]) == pytest.approx(5e-3 + 40 * 1e-3)


def test_chunked_prefill_runs_the_first_admitted_first_within_the_step_budget() -> None:
    inst = SimInstance(0, COST, max_batch=4, kv_capacity=1000, max_prefill_tokens=32)
    inst.enqueue(chunk(0, 70, 3))
    inst.enqueue(chunk(1, 10, 3))
    for _ in range(2):  # 32 tokens of request 0 a step; request 1 waits its turn
        inst.plan(0.0)
        assert inst.seg_steps == 1  # a step that leaves a prefill unfinished ends the stretch
        assert inst.finish() == [] and [c.done for c in inst.running] == [0.0, 0.0]
    assert [c.pending_prefill for c in inst.running] == [6, 10]
    # the third step completes both prefills (each samples its first token); two more
    # decode steps finish them
    inst.plan(0.0)
    assert inst.seg_steps == 3 and inst.counts["num_steps"] == 2
    assert sorted(c.request for c in inst.finish()) == [0, 1]
    assert inst.counts["num_steps"] == 5


def test_a_max_table_prices_a_stretch_by_its_largest_draft() -> None:
    """On the built-in engine's table (rows keyed by the longest row) one row drafting 8
    tokens makes the whole batch's verify step cost as if every row drafted 8."""
    from tests.sim.test_steplog import DRAFT_ROWS

    def step_s(context: str, drafts: list[int]) -> float:
        cost = CostModel(DRAFT_ROWS, "s", context=context)
        inst = SimInstance(0, cost, max_batch=4, kv_capacity=10_000, max_steps=1)
        for i in range(4):
            inst.enqueue(chunk(i, 32, 50))
        inst.plan(0.0)  # the prefill step
        inst.finish()

        def grant(instance: SimInstance) -> None:
            for c, g in zip(instance.running, drafts, strict=True):
                c.draft = g

        inst.on_batch = grant
        end = inst.plan(1.0)
        assert end is not None and inst.seg_steps == 1
        return end - 1.0

    assert step_s("max", [4, 0, 0, 0]) == pytest.approx(step_s("max", [4, 4, 4, 4]))
    assert step_s("mean", [4, 0, 0, 0]) == pytest.approx(step_s("mean", [1, 1, 1, 1]))
    assert step_s("max", [4, 0, 0, 0]) > step_s("mean", [4, 0, 0, 0])


def test_a_pace_prices_each_stretch_at_the_factor_of_its_start() -> None:
    steady = SimInstance(0, COST, max_batch=4, kv_capacity=10_000, max_steps=8)
    paced = SimInstance(
        0, COST, max_batch=4, kv_capacity=10_000, max_steps=8, pace=((0.0, 1.0), (1.0, 3.0))
    )
    for inst in (steady, paced):
        inst.enqueue(chunk(0, 100, 40))
        inst.plan(0.0)
        inst.finish()  # the prefill step
    assert paced.pace(0.5) == 1.0 and paced.pace(1.0) == paced.pace(9.0) == 3.0
    assert SimInstance(0, COST, max_batch=1, kv_capacity=1).pace(5.0) == 1.0  # no pace
    before = steady.plan(0.5), paced.plan(0.5)
    assert before[0] == pytest.approx(before[1])  # the factor at 0.5: 1.0
    steady.finish()
    paced.finish()
    took = steady.plan(2.0) - 2.0, paced.plan(2.0) - 2.0  # type: ignore[operator]
    assert took[1] == pytest.approx(3 * took[0])  # from 1 s on, every step costs 3x
    with pytest.raises(ValueError, match="pace"):
        SimInstance(0, COST, max_batch=1, kv_capacity=1, pace=((0.0, 1.0), (0.0, 2.0)))
    with pytest.raises(ValueError, match="pace"):
        SimInstance(0, COST, max_batch=1, kv_capacity=1, pace=((0.0, 0.0),))
