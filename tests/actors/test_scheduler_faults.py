"""The scheduler's books for chunks that do not finish (issue 34 section 2): the core
re-queues one chunk from its committed progress (and refuses a stale one), and the
`FaultBook` prices deadlines by a generator's pace and loses a generator only after
failures in a row."""

from __future__ import annotations

from actors.scheduler.faults import FaultBook
from actors.scheduler.options import SchedulerOptions
from tests.actors.test_scheduler_core import core_for, group


def test_a_requeued_chunk_goes_back_from_its_committed_progress_once() -> None:
    core = core_for("divided")
    core.add(group("g0", 1, 0), now=0.0)
    [d] = core.next_dispatches(0.0)
    assert core.on_chunk_finished(d.request_id, d.instance, d.chunk_seq, 16, False, 1.0) == "ok"
    [d2] = core.next_dispatches(1.0)
    assert core.requeue_chunk(d2.request_id, d2.instance, d2.chunk_seq, 2.0) == "ok"
    assert core.requeue_chunk(d2.request_id, d2.instance, d2.chunk_seq, 2.0) == "stale"
    req = core.request(d2.request_id)
    assert (req.status, req.generated, req.kv_instance) == ("waiting", 16, None)
    [d3] = core.next_dispatches(3.0)
    assert d3.chunk_seq == d2.chunk_seq + 1 and d3.max_chunk_tokens == 16
    # the late result of the requeued chunk is stale, the new one counts
    assert core.on_chunk_finished(d2.request_id, d2.instance, d2.chunk_seq, 16, False, 4.0) == (
        "stale"
    )
    assert core.on_chunk_finished(d3.request_id, d3.instance, d3.chunk_seq, 16, False, 4.0) == "ok"
    assert core.request(d3.request_id).generated == 32


def test_deadlines_follow_the_pace_above_a_floor_and_faults_in_a_row_lose() -> None:
    book = FaultBook.of(SchedulerOptions(chunk_deadline_floor_s=2.0, chunk_deadline_slack=4.0))
    assert book.chunk_time_s(0, 100) == 2.0  # no pace measured yet: the floor
    book.served(0, elapsed_s=5.0, num_tokens=100)  # 0.05 s per token
    assert book.chunk_time_s(0, 100) == 4.0 * 100 * 0.05
    book.dispatched("a", 1, 0, 100, now=10.0)
    book.dispatched("b", 1, 1, 100, now=10.0)  # instance 1: the floor
    assert book.overdue(11.0) == []
    assert book.overdue(12.5) == [("b", 1, 1)]
    assert book.overdue(30.0) == [("a", 0, 1)] and book.deadlines == {}
    assert [book.failed(1), book.failed(1)] == [0, 0]
    book.served(1, 1.0, 10)  # forgiven
    assert [book.failed(1), book.failed(1), book.failed(1)] == [0, 0, 3]
    assert book.faulty == {1} and book.num_failed_chunks == 5
    book.back(1)
    assert book.faulty == set() and book.failed(1) == 0
