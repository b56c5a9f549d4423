"""The indexed waiting buffer makes exactly the plain scan's dispatch decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.scheduler import InstanceLoad, RequestState, SchedulerCore, make_policy
from actors.scheduler.policy import PROBE_FIRST_RULES, ContextAware
from actors.scheduler.waiting import WaitingIndex

LIMIT = 64
RANKED = ("divided", "context_aware", "oracle")


def requests(prompt_lens: list[int]) -> list[RequestState]:
    return [
        RequestState(
            request_id=f"r{i}",
            group_id=f"g{i // 3}",
            is_probe=i % 3 == 0,
            prompt_len=n,
            max_new_tokens=LIMIT,
            arrival=i,
        )
        for i, n in enumerate(prompt_lens)
    ]


def pair(
    name: str, n: int, probe_first: str = "always", **kw: int
) -> tuple[SchedulerCore, SchedulerCore]:
    true = {f"r{i}": 1 + (i * 37) % LIMIT for i in range(64)}

    def core(indexed: bool) -> SchedulerCore:
        policy = make_policy(
            name, num_instances=n, max_new_tokens=LIMIT, true_lengths=true, probe_first=probe_first
        )
        if isinstance(policy, ContextAware):
            policy.starvation_s = 4.0  # short enough that random runs starve requests
        return SchedulerCore(policy, n, indexed=indexed, **kw)  # type: ignore[arg-type]

    return core(True), core(False)


def test_only_ranked_bounded_policies_are_indexed() -> None:
    for name in ("baseline", *RANKED):
        indexed, plain = pair(name, 2, chunk_size=8, max_running_per_instance=2)
        assert (indexed._index is not None) == (name in RANKED)
        assert plain._index is None
    with pytest.raises(ValueError, match="no rank"):
        WaitingIndex(make_policy("baseline", num_instances=2, max_new_tokens=8))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(RANKED),
    num_instances=st.integers(1, 4),
    max_running=st.integers(1, 4),
    chunk_size=st.integers(1, 40),
    spread=st.integers(0, 3),
    prompt_lens=st.lists(st.integers(1, 60), min_size=1, max_size=30),
    probe_first=st.sampled_from(PROBE_FIRST_RULES),
    data=st.data(),
)
def test_indexed_and_plain_cores_dispatch_alike(
    name: str,
    num_instances: int,
    max_running: int,
    chunk_size: int,
    spread: int,
    prompt_lens: list[int],
    probe_first: str,
    data: st.DataObject,
) -> None:
    cores = pair(
        name,
        num_instances,
        probe_first,
        chunk_size=chunk_size,
        max_running_per_instance=max_running,
        affinity_spread=spread,
    )
    reqs = requests(prompt_lens)
    pending = [[replace(r) for r in reqs] for _ in cores]
    in_flight: dict[str, tuple[int, int, int]] = {}  # id -> instance, seq, max_chunk_tokens
    now = 0.0
    for _ in range(data.draw(st.integers(1, 120))):
        now += data.draw(st.sampled_from([0.0, 0.5, 3.0]))
        op = data.draw(st.sampled_from(["add", "go", "go", "answer", "answer", "load", "est"]))
        if op == "add" and pending[0]:
            k = data.draw(st.integers(1, len(pending[0])))
            for core, rs in zip(cores, pending, strict=True):
                core.add(rs[:k], now)
                del rs[:k]
        elif op == "go":
            a, b = (core.next_dispatches(now) for core in cores)
            assert a == b
            for d in a:
                in_flight[d.request_id] = (d.instance, d.chunk_seq, d.max_chunk_tokens)
        elif op == "answer" and in_flight:
            rid = data.draw(st.sampled_from(sorted(in_flight)))
            instance, seq, max_chunk_tokens = in_flight.pop(rid)
            n = data.draw(st.integers(0, max_chunk_tokens))
            done = data.draw(st.booleans())
            for core in cores:
                assert core.on_chunk_finished(rid, instance, seq, n, done, now) == "ok"
        elif op == "load":
            i = data.draw(st.integers(0, num_instances - 1))
            total = data.draw(st.integers(1, 400))
            load = InstanceLoad(
                index=i,
                num_running=0,
                num_waiting=0,
                kv_tokens_used=data.draw(st.integers(0, total)),
                kv_tokens_total=total,
                max_running=max_running,
            )
            for core in cores:
                core.update_load(load)
        elif op == "est":
            group, estimate = f"g{data.draw(st.integers(0, 9))}", data.draw(st.integers(1, LIMIT))
            for core in cores:
                core.update_estimate(group, estimate)
        if data.draw(st.integers(0, 30)) == 0:  # a generator lost now and then
            i = data.draw(st.integers(0, num_instances - 1))
            lost = [core.requeue_instance(i, now, mark_down=True) for core in cores]
            assert lost[0] == lost[1]
            for rid in lost[0]:
                in_flight.pop(rid)
    for a, b in zip(*(core.counters.items() for core in cores), strict=True):
        assert a == b
    assert cores[0].num_waiting == cores[1].num_waiting
