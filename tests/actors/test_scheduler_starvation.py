"""Anti-starvation in context-aware scheduling: occasional relief, not FIFO after a minute.

Before the fix every request that had never run counted as "starved" once the rollout was
older than ``starvation_s`` (it entered the buffer at the rollout's start), so with a backlog
context-aware ordering degenerated to FIFO; and every starved request jumped the queue at
once. Now only a request that has already run a chunk and then waited past ``starvation_s``
is starved, and at most one starved request is promoted per ``starvation_every`` dispatches.
Both the indexed core and the plain scan are checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.scheduler import RequestState, SchedulerCore
from actors.scheduler.policy import ContextAware, Policy, make_policy
from pipeline.rollout.api import Rollout, rollout_config
from transport.messages import SamplingSpec

LIMIT = 1000


def members(gid: str, size: int, first: int) -> list[RequestState]:
    return [
        RequestState(
            request_id=f"{gid}-{i}",
            group_id=gid,
            is_probe=False,
            prompt_len=8,
            max_new_tokens=LIMIT,
            arrival=first + i,
        )
        for i in range(size)
    ]


def core(indexed: bool, every: int = 4, slots: int = 1) -> SchedulerCore:
    policy = ContextAware(LIMIT, starvation_s=60.0, starvation_every=every)
    return SchedulerCore(policy, 1, chunk_size=16, max_running_per_instance=slots, indexed=indexed)


@pytest.mark.parametrize("indexed", [True, False])
def test_unstarted_backlog_keeps_context_order_after_starvation_age(indexed: bool) -> None:
    c = core(indexed)
    c.update_estimate("short", 20)
    c.update_estimate("long", 900)
    c.add(members("short", 3, 0) + members("long", 3, 3), now=0.0)
    # a rollout 100 s old: nobody has run yet, so nobody is starved; longest group first
    [d] = c.next_dispatches(100.0)
    assert d.request_id == "long-0"
    assert c.counters["starvation_picks"] == 0


@pytest.mark.parametrize("indexed", [True, False])
def test_starved_requests_are_promoted_one_per_k_dispatches(indexed: bool) -> None:
    c = core(indexed, every=4, slots=8)
    c.update_estimate("short", 20)
    c.update_estimate("long", 900)
    c.add(members("short", 4, 0), now=0.0)
    first = c.next_dispatches(0.0)  # the four short ones run a chunk, then wait
    assert sorted(d.request_id for d in first) == [f"short-{i}" for i in range(4)]
    for d in first:
        c.on_chunk_finished(d.request_id, 0, d.chunk_seq, 16, False, 1.0)
    c.add(members("long", 8, 4), now=1.0)
    ds = c.next_dispatches(100.0)  # all four short ones are starved (waited 99 s > 60 s)
    got = [d.request_id for d in ds]
    # one promoted ahead, then context order (longest group first); the other three short
    # ones run by rank once the working set (8 places, half of it theirs) is full
    assert got == ["short-0", *[f"long-{i}" for i in range(4)], "short-1", "short-2", "short-3"]
    assert c.counters["starvation_picks"] == 1
    for d in ds:
        c.on_chunk_finished(d.request_id, 0, d.chunk_seq, 16, False, 101.0)
    again = [d.request_id for d in c.next_dispatches(300.0)]  # all eight starved now
    # seven dispatches since the last promotion: one more promotion, then rank order
    assert again[:3] == ["short-0", "long-0", "long-1"] and c.counters["starvation_picks"] == 2


@pytest.mark.anyio
async def test_the_live_scheduler_takes_starvation_every_from_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler actor builds its rollout's policy with the options' `starvation_s` and
    `starvation_every` (it passed only the first: the policy's default 8 was used), and its
    `long_band`. A real
    in-process rollout; the policy the actor built is looked at on its way out."""
    built: list[Policy] = []

    def keep(*args: Any, **kwargs: Any) -> Policy:
        built.append(make_policy(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr("actors.scheduler.actor.make_policy", keep)
    model = {"vocab_size": 32, "hidden": 16, "num_layers": 1, "num_heads": 2,
             "num_kv_heads": 1, "intermediate": 32, "max_context": 64}  # fmt: skip
    config = rollout_config(
        num_generators=1,
        chunk_size=2,
        generator={"model": model, "max_batch": 2, "spec": {"mode": "off"}},
        scheduler={"starvation_s": 7.0, "starvation_every": 3, "long_band": 1.25},
        run_dir=str(tmp_path),
    )
    sampling = SamplingSpec(max_new_tokens=4, ignore_eos=True, seed=0)
    async with Rollout(config, mode="inprocess", timeout_s=120) as rollout:
        [group] = await rollout.generate([[1, 2, 3]], 2, sampling)
    assert [len(s.token_ids) for s in group.samples] == [4, 4]
    [policy] = built
    assert isinstance(policy, ContextAware)
    assert (policy.starvation_s, policy.starvation_every) == (7.0, 3)
    assert policy.long_band == 1.25
