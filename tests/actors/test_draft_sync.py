"""DraftSync (a generator's background exchange with the draft store) against the real store
actor, in process: a new group whose `GroupsOpened` reaches the store after the generator's
first pull still gets the last rollout's history; an ended chunk's tokens go at once."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import structlog

from actors.base import Mailbox
from actors.drafts.options import SpecConfig
from actors.drafts.store import HISTORY_PREFIX
from actors.generator.draft_sync import DraftSync
from actors.generator.speculator import Speculator
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import launch_inprocess
from transport.messages import (
    ActorStats,
    GetStats,
    GroupInfo,
    GroupsClosed,
    GroupsOpened,
    Message,
    TokenAppend,
    TokensAppended,
)

pytestmark = pytest.mark.anyio

PROMPT = tuple(range(20, 40))


def store_config(tmp_path: Path) -> PipelineConfig:
    group = ActorGroup(role="drafts", kind="drafts", options={"keep_history": True})
    return PipelineConfig(
        topology=Topology(actors=(group,)), transport=TransportConfig(run_dir=str(tmp_path))
    )


def opened(rollout: str, gid: str) -> GroupsOpened:
    info = GroupInfo(group_id=gid, prompt_id="p", size=1, prompt_tail=PROMPT[-16:])
    return GroupsOpened(rollout_id=rollout, groups=(info,), generation_limit=64)


async def test_a_group_opened_after_the_first_pull_still_gets_its_history(
    tmp_path: Path,
) -> None:
    """Syncs 10 s apart: only the new group's pull and the re-pulls of a group the store
    had not opened can bring the history in time."""
    async with launch_inprocess(store_config(tmp_path)) as cluster:
        mailbox: Mailbox = cluster.mailbox
        # the last rollout: one response of prompt p, kept as its history
        await cluster.send("drafts", 0, opened("r0", "r0:g0"))
        append = TokenAppend(
            group_id="r0:g0", request_id="a", chunk_seq=0, start=0, token_ids=(1, 2, 3, 4)
        )
        await cluster.send("drafts", 0, TokensAppended(appends=(append,)))
        await cluster.send("drafts", 0, GroupsClosed(rollout_id="r0", group_ids=("r0:g0",)))
        spec = Speculator(SpecConfig(budget="fixed", sync_interval_s=10.0), lambda b, g: 1.0)
        assert spec.client is not None
        sync = DraftSync(spec, mailbox, structlog.get_logger())
        spec.start("b", "r1:g0", 0, PROMPT, (), is_probe=True)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sync.run)
                sync.wake()
                while not spec.client.store_id:  # the first pull came back...
                    await anyio.sleep(0.001)
                assert sync.unopened == ("r1:g0",)  # ...before the group was opened
                await cluster.send("drafts", 0, opened("r1", "r1:g0"))
                replica = spec.client.replicas["r1:g0"]
                while f"{HISTORY_PREFIX}0" not in replica.seqs:
                    await anyio.sleep(0.001)
                tg.cancel_scope.cancel()
        assert replica.seqs[f"{HISTORY_PREFIX}0"].tokens == [1, 2, 3, 4]
        assert sync.unopened == ()
        spec.client.extend("b", [1])  # its first token: the history drafts the rest
        res = spec.client.speculate("b", max_tokens=4)
        assert res is not None and list(res.token_ids) == [2, 3, 4]
        # the chunk ends: its tokens go to the store at once, not with the next sync
        sync.push_ended(["b"])
        with anyio.fail_after(5):
            while True:
                stats = await cluster.call("drafts", 0, GetStats())
                assert isinstance(stats, ActorStats)
                if stats.counters["appended_tokens"] == 4 + 1:
                    break
                await anyio.sleep(0.01)


class FullOnce(Mailbox):
    """The real mailbox, whose draft-store queue is full for the first offer."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.num_refused = 0

    def offer(self, role: str, index: int, msg: Message) -> bool:
        if not self.num_refused:
            self.num_refused += 1
            return False
        return self.inner.offer(role, index, msg)

    async def call(self, role: str, index: int, msg: Message, timeout: float = 10.0) -> Message:
        return await self.inner.call(role, index, msg, timeout)


async def test_an_ended_chunks_tokens_refused_by_a_full_queue_go_with_the_next_sync(
    tmp_path: Path,
) -> None:
    """Before: `push_ended` dropped them (their request no longer runs here, so nothing
    re-read them) and the store never had the sample's end."""
    async with launch_inprocess(store_config(tmp_path)) as cluster:
        await cluster.send("drafts", 0, opened("r1", "r1:g0"))
        spec = Speculator(SpecConfig(budget="fixed", sync_interval_s=10.0), lambda b, g: 1.0)
        assert spec.client is not None
        mailbox = FullOnce(cluster.mailbox)
        sync = DraftSync(spec, mailbox, structlog.get_logger())
        spec.start("b", "r1:g0", 0, PROMPT, (), is_probe=True)
        spec.client.extend("b", [5, 6, 7])
        sync.push_ended(["b"])  # the store's queue is full
        assert mailbox.num_refused == 1 and sync.num_dropped_appends == 1
        await sync.sync_once(pull=False)
        with anyio.fail_after(5):
            while True:
                stats = await cluster.call("drafts", 0, GetStats())
                assert isinstance(stats, ActorStats)
                if stats.counters["appended_tokens"] == 3:
                    break
                await anyio.sleep(0.01)
        assert sync.unsent_ended == []
