"""Grouped speculation stays quiet where drafts do not pay. Measured on this CPU (`seer bench
drafts`, 128 prompts): with speculation on but drafting nothing, the draft sync's messages
and the store's work for them cost the generators 8-25% of their throughput, while the
same speculator without a sync cost none. So, while a generator is not drafting:
- the sync runs at full rate only while the budget's own grants are drafted (not its
  explorations); a new group does not wake it, and drafts looked up after `RECENT_STEPS`
  steps without ask for a catch-up pull, at most one per `CATCH_UP_INTERVALS`;
- the sync pushes and checks the store is alive only every `LIVENESS_CYCLES` slow cycles,
  and that check names no group (the store sends no tokens);
- an ended chunk's last tokens wait for that sync, unless the store keeps history;
- a step that also prefills is drafted only where drafted steps realized a gain;
and a pull that does carry tokens sends each sequence's run of appends as one entry."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
import structlog

from actors.base import Mailbox
from actors.drafts.client import DraftClient
from actors.drafts.options import SpecConfig
from actors.drafts.policy import MarginalBenefitPolicy
from actors.drafts.store import DraftStore, coalesce
from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.generator.draft_sync import CATCH_UP_INTERVALS, LIVENESS_CYCLES, DraftSync
from actors.generator.drivers import will_prefill
from actors.generator.speculator import RECENT_STEPS, Speculator
from actors.model import LlamaModel, ModelOptions
from pipeline.config import ActorGroup, PipelineConfig, Topology, TransportConfig
from pipeline.launch import launch_inprocess
from tests.actors.test_draft_policy import cheap, costly, drive, trusted
from tests.actors.test_draft_store import TAIL, opened, put
from tests.actors.test_draft_sync import PROMPT
from tests.actors.test_draft_sync import opened as opened_msg
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import Message, SeqDelta, TokensAppended


def test_a_pull_replays_each_sequences_run_of_appends_as_one_entry() -> None:
    store = DraftStore(max_depth=16)
    opened(store, "g")
    for i in range(30):  # two requests' appends, interleaved, a token or two each
        store.append(put("g", "a", 2 * i, [i % 7, (i + 1) % 7]))
        store.append(put("g", "b", i, [i % 5]))
    store.append(put("g", "b", 10, [9, 9, 9], chunk=1))  # a newer chunk disagrees: new epoch
    store.append(put("g", "b", 13, [4], chunk=1))
    whole = DraftClient("group", max_depth=16, max_match=4)
    whole.start("x", "g", 0, list(TAIL), [])
    reply = store.sync(whole.sync_message())  # type: ignore[arg-type]
    assert len(store.groups["g"].log) == 62
    assert [(d.seq, d.epoch, d.start, len(d.token_ids)) for d in reply.deltas] == [
        ("a", 0, 0, 60),
        ("b", 0, 0, 30),  # replayed, then replaced from 0 at epoch 1
        ("b", 1, 0, 14),
    ]
    whole.apply(reply)
    replica = whole.replicas["g"]
    for seq in ("a", "b"):
        assert replica.seqs[seq].tokens == store.groups["g"].seqs[seq].tokens
    # runs that do not continue one another (a gap, an overlap) stay apart
    parts = [
        SeqDelta(group_id="g", seq="a", epoch=0, start=0, token_ids=(1, 2)),
        SeqDelta(group_id="g", seq="a", epoch=0, start=3, token_ids=(4,)),
        SeqDelta(group_id="g", seq="a", epoch=0, start=3, token_ids=(4, 5)),
    ]
    assert coalesce(parts) == parts


def test_a_liveness_pull_names_no_group_and_says_whether_the_store_keeps_history() -> None:
    for keep in (False, True):
        store = DraftStore(max_depth=8, keep_history=keep)
        opened(store, "g")
        store.append(put("g", "a", 0, [1, 2, 3]))
        client = DraftClient("group", max_depth=8, max_match=4)
        client.start("x", "g", 0, list(TAIL), [])
        client.extend("x", [5, 6])
        client.take_appends()  # sent, and lost on the way: the store holds none of them
        msg = client.sync_message(groups=False)
        assert msg is not None and msg.groups == ()
        reply = store.sync(msg)
        assert reply.deltas == () and reply.keeps_history is keep
        client.apply(reply)
        assert client.store_keeps_history is keep
        assert "a" not in client.replicas["g"].seqs  # no sibling's tokens came
        assert [a.token_ids for a in client.take_appends()] == [(5, 6)]  # sent again


def test_an_off_class_decides_drafting_not_its_explorations() -> None:
    """A losing class: `can_pay` lets an exploration or probe through now and then, but
    `is_on` stays False (the speculator does not resume the sync for them); a step that
    prefills drafts only where drafted steps realized a gain."""
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    assert not policy.drafts_with_prefill(16)  # nothing measured yet
    drive(policy, 100, costly)
    assert policy.losing(16)
    decisions = [(policy.can_pay(16), policy.is_on) for _ in range(2000)]
    assert any(pays for pays, _ in decisions) and not any(on for _, on in decisions)
    assert not policy.drafts_with_prefill(16)
    drive(policy, 1000, cheap)  # drafts pay again: probes turn it back on
    drive(policy, 200, cheap)
    assert policy.can_pay(16) and policy.is_on and policy.drafts_with_prefill(16)
    assert not policy.drafts_with_prefill(2)  # another class: no evidence


def test_the_speculator_skips_prefill_steps_and_resumes_only_after_a_pause() -> None:
    spec = Speculator(SpecConfig(budget="fixed", mode="self"), lambda b, g: 1.0)
    resumes: list[int] = []
    spec.on_resume = lambda: resumes.append(1)
    spec.start("a", "g", 0, PROMPT, (1, 2, 3, 1, 2, 3, 1, 2), is_probe=False)
    assert spec.drafts(["a"]) and spec.drafted_lately  # a fixed budget drafts the repeat
    assert not resumes  # it never stopped
    # a fixed budget drafts in prefill steps too; an adaptive one needs evidence
    assert spec.drafts(["a"], prefill=True)
    adaptive = Speculator(SpecConfig(mode="self"), lambda b, g: 1.0)
    adaptive.on_resume = lambda: resumes.append(2)
    assert isinstance(adaptive.policy, MarginalBenefitPolicy)
    trusted(adaptive.policy, 0.95)
    adaptive.start("a", "g", 0, PROMPT, (1, 2, 3, 1, 2, 3, 1, 2), is_probe=False)
    for _ in range(RECENT_STEPS - 1):
        assert adaptive.drafts(["a"], prefill=True) == {}
    assert adaptive.drafted_lately and not adaptive.is_drafting
    assert adaptive.drafts(["a"], prefill=True) == {}
    assert not adaptive.drafted_lately
    assert adaptive.drafts(["a"])  # a decode step: drafting resumes, the sync catches up
    assert resumes == [2] and adaptive.num_resumes == 1


def test_will_prefill_reads_the_engines_slots_and_queue() -> None:
    model = LlamaModel.random(ModelOptions(**TINY_GENERATOR["model"]).config(), seed=0)
    engine = TorchEngine(model, EngineConfig(max_batch=2, profile=False, num_threads=1))
    params = SamplingParams(temperature=0.0, seed=0, ignore_eos=True)
    for i in range(3):
        engine.add(ChunkRequest(f"r{i}", tuple(range(5, 14)), 20, params=params))
    assert will_prefill(engine, engine.decoding_request_ids())  # waiting, slots free
    engine.step()
    decoding = engine.decoding_request_ids()
    assert len(decoding) == 2 and not will_prefill(engine, decoding)  # slots full
    while len(engine.decoding_request_ids()) == 2:
        engine.step()
    # a row finished: the third request is admitted next (or is already prefilling)
    assert will_prefill(engine, engine.decoding_request_ids())


class Recording(Mailbox):
    """The real mailbox, keeping what goes to the store."""

    def __init__(self, inner: Mailbox) -> None:
        self.inner = inner
        self.offers: list[Message] = []
        self.calls: list[Message] = []

    def offer(self, role: str, index: int, msg: Message) -> bool:
        self.offers.append(msg)
        return self.inner.offer(role, index, msg)

    async def call(self, role: str, index: int, msg: Message, timeout: float = 10.0) -> Message:
        self.calls.append(msg)
        return await self.inner.call(role, index, msg, timeout)


class Unreachable(Mailbox):
    """No store at all: for what the sync decides before it sends anything."""

    def __init__(self) -> None:
        pass


def no_history_store(tmp_path: Path) -> PipelineConfig:
    group = ActorGroup(role="drafts", kind="drafts", options={"keep_history": False})
    return PipelineConfig(
        topology=Topology(actors=(group,)), transport=TransportConfig(run_dir=str(tmp_path))
    )


@pytest.mark.anyio
async def test_a_generator_not_drafting_sends_the_store_almost_nothing(tmp_path: Path) -> None:
    """The real store in process, syncs every 2 ms: while the speculator is not drafting,
    a new group wakes nothing, an ended chunk waits for the next push, and that push comes
    with a liveness check naming no group, every `LIVENESS_CYCLES` cycles."""
    async with launch_inprocess(no_history_store(tmp_path)) as cluster:
        await cluster.send("drafts", 0, opened_msg("r1", "r1:g0"))
        spec = Speculator(SpecConfig(budget="fixed", sync_interval_s=0.002), lambda b, g: 1.0)
        assert isinstance(spec.client, DraftClient)
        mailbox = Recording(cluster.mailbox)
        sync = DraftSync(spec, mailbox, structlog.get_logger())
        spec.start("a", "r1:g0", 0, PROMPT, (), is_probe=False)
        spec.start("b", "r1:g0", 0, PROMPT, (), is_probe=False)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sync.run)
                sync.wake()  # before any step decided: pulled at once
                while not spec.client.store_id:
                    await anyio.sleep(0.001)
                assert spec.client.store_keeps_history is False
                spec.steps_off = RECENT_STEPS  # steps where drafts do not pay
                spec.start("c", "r1:g1", 0, PROMPT, (), is_probe=False)
                sync.wake()  # a new group: no pull for it now
                spec.client.extend("b", [4, 5, 6])
                sync.push_ended(["b"])
                assert mailbox.offers == [] and len(sync.unsent_ended) == 1
                calls, cycles = len(mailbox.calls), sync.num_cycles
                while sync.num_cycles < cycles + 2 * LIVENESS_CYCLES + 1:
                    spec.client.extend("a", [7])
                    await anyio.sleep(0.001)
                checks = mailbox.calls[calls:]
                assert 1 <= len(checks) <= 3
                assert all(not getattr(c, "groups", ()) for c in checks)
                assert "r1:g1" not in spec.client.replicas or not any(
                    s for s in spec.client.replicas["r1:g1"].seqs if s != "c"
                )
                pushed = [
                    a for m in mailbox.offers if isinstance(m, TokensAppended) for a in m.appends
                ]
                assert ("b", (4, 5, 6)) in [(a.request_id, a.token_ids) for a in pushed]
                assert len(mailbox.offers) <= 3  # a push per liveness cycle, not one per cycle
                tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_catch_ups_while_quiet_are_at_most_one_pull_per_interval() -> None:
    spec = Speculator(SpecConfig(budget="fixed"), lambda b, g: 1.0)
    sync = DraftSync(spec, Unreachable(), structlog.get_logger())
    sync.last_pull_at = time.monotonic()  # a pull naming the groups just went out
    sync.catch_up()
    assert not sync._wake.is_set()
    sync.last_pull_at -= CATCH_UP_INTERVALS * spec.config.sync_interval_s
    sync.catch_up()
    assert sync._wake.is_set()
