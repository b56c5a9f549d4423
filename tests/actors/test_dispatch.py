"""The data dispatcher's pure core: every sample reaches exactly one rank, token-balanced;
groups complete with the advantages make_batch would compute; errors are dropped and
counted; a rank's shard must match its layout exactly."""

from __future__ import annotations

import dataclasses
import random

import anyio
import numpy as np
import pytest
import torch

from actors.dispatcher.actor import Dispatcher
from actors.dispatcher.core import DispatchPlan, imbalance, lpt_assign, sample_data
from actors.errors import DispatchError
from actors.trainer import TrainSample, compute_advantages
from actors.trainer.shard import Shard, ShardBuffer, train_sample_of
from transport.messages import (
    GroupAdvantages,
    Message,
    SampleDispatched,
    SamplingSpec,
    ShardEnd,
    ShardHeld,
    ShardLayout,
)

SAMPLING = SamplingSpec(temperature=0.8, top_k=5)


def make_samples(num_groups: int, group_size: int, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for g in range(num_groups):
        scale = rng.choice((4, 16, 64))  # lengths correlated within a group, long-tailed
        for i in range(group_size):
            n = rng.randint(1, scale)
            out.append(
                TrainSample(
                    prompt_ids=(1, 2, g % 7 + 3),
                    completion_ids=tuple(rng.randrange(30) for _ in range(n)),
                    old_logprobs=tuple(float(np.float32(-rng.random())) for _ in range(n)),
                    reward=float(rng.random() < 0.5),
                    group_id=f"g{g}",
                    weight_versions=(0,),
                    request_id=f"g{g}-{i}",
                )
            )
    rng.shuffle(out)  # samples finish in any order
    return out


def dispatch(
    samples: list[TrainSample], ranks: int, group_size: int, errors: frozenset[str] = frozenset()
) -> tuple[DispatchPlan, list[Shard]]:
    plan = DispatchPlan(ranks, group_size)
    buffers = [ShardBuffer() for _ in range(ranks)]
    for s in samples:
        data = sample_data(s)
        rank, adv, adv_ranks = plan.add(
            s.request_id, s.group_id, len(s.completion_ids), s.reward, s.request_id in errors
        )
        if rank is not None:
            buffers[rank].add_sample(0, data)
        if adv is not None:
            for r in adv_ranks:
                buffers[r].add_advantages(adv)
    shards = [b.take(plan.layout(r, SAMPLING)) for r, b in enumerate(buffers)]
    return plan, shards


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_every_sample_reaches_exactly_one_rank_balanced(ranks: int) -> None:
    samples = make_samples(32, 8)
    plan, shards = dispatch(samples, ranks, 8)
    held = [s.request_id for shard in shards for s in shard.samples]
    assert sorted(held) == sorted(s.request_id for s in samples)  # exactly once each
    loads = [sum(len(s.completion_ids) for s in shard.samples) for shard in shards]
    assert loads == plan.loads
    assert imbalance(loads) <= 1.05
    assert plan.num_dropped == 0 and not plan.incomplete_groups


def test_advantages_travel_as_make_batch_computes_them() -> None:
    samples = make_samples(16, 4, seed=1)
    _, shards = dispatch(samples, 4, 4)
    by_id = {s.request_id: i for i, s in enumerate(samples)}
    expected = compute_advantages(samples)
    for shard in shards:
        for s, adv, share in zip(shard.samples, shard.advantages, shard.flat_share, strict=True):
            assert adv == pytest.approx(float(expected[by_id[s.request_id]]), abs=1e-6)
            group = [x.reward for x in samples if x.group_id == s.group_id]
            assert share == (0.25 if len(set(group)) == 1 else 0.0)
            assert s == samples[by_id[s.request_id]]  # the sample round-trips exactly


def test_error_samples_are_dropped_everywhere_and_counted() -> None:
    samples = make_samples(8, 4, seed=2)
    errors = {samples[0].request_id, samples[5].request_id}
    plan, shards = dispatch(samples, 2, 4, errors)
    held = {s.request_id for shard in shards for s in shard.samples}
    assert held == {s.request_id for s in samples} - errors
    assert plan.num_dropped == 2
    layouts = [plan.layout(r, SAMPLING) for r in range(2)]
    assert all(lay.num_dropped == 2 and lay.sampling == SAMPLING for lay in layouts)
    kept = [s for s in samples if s.request_id not in errors]  # advantages over the others
    expected = compute_advantages(kept)
    by_id = {s.request_id: i for i, s in enumerate(kept)}
    for shard in shards:
        for s, adv in zip(shard.samples, shard.advantages, strict=True):
            assert adv == pytest.approx(float(expected[by_id[s.request_id]]), abs=1e-6)


def test_shard_must_match_layout() -> None:
    samples = make_samples(4, 2)
    plan = DispatchPlan(2, 2)
    buffer = ShardBuffer()
    for s in samples:
        rank, adv, ranks = plan.add(s.request_id, s.group_id, 3, s.reward, False)
        if rank == 0:
            buffer.add_sample(0, sample_data(s))
        if adv is not None and 0 in ranks:
            buffer.add_advantages(adv)
    layout = plan.layout(0, SAMPLING)
    lost = layout.request_ids[0]
    del buffer.samples[lost]  # a sample that never arrived
    with pytest.raises(DispatchError, match="1 samples missing"):
        buffer.take(layout)
    with pytest.raises(DispatchError, match="twice"):
        plan.add(samples[0].request_id, samples[0].group_id, 3, 0.0, False)


def test_incomplete_group_and_wrong_iteration_are_refused() -> None:
    plan = DispatchPlan(2, 4)
    plan.add("a", "g", 3, 1.0, False)
    assert plan.incomplete_groups == ["g"]
    buffer = ShardBuffer()
    s = make_samples(1, 1)[0]
    buffer.add_sample(3, sample_data(s))
    with pytest.raises(DispatchError, match="iteration"):
        buffer.add_sample(4, sample_data(s))


def test_lpt_assign_balances_whole_items() -> None:
    sizes = [random.Random(3).randint(1, 100) for _ in range(64)]
    for ranks in (2, 4):
        assign = lpt_assign(sizes, ranks)
        loads = [sum(s for s, r in zip(sizes, assign, strict=True) if r == k) for k in range(ranks)]
        assert imbalance(loads) <= 1.05
    assert lpt_assign([5, 4, 3, 3, 3], 2) == [0, 1, 1, 0, 1]
    with pytest.raises(ValueError):
        lpt_assign([1], 0)


def test_sample_data_round_trip_keeps_arrays_typed() -> None:
    s = make_samples(1, 1)[0]
    d = sample_data(s)
    assert d.token_ids.dtype.name == "int32" and d.loss_mask.sum() == len(s.completion_ids)
    assert train_sample_of(d) == s
    assert torch.tensor(d.old_logprobs).shape == (len(s.prompt_ids) + len(s.completion_ids),)


class RecordingRanks:
    """The dispatcher's mailbox, delivering to each rank's `ShardBuffer` in-process and
    recording what every rank got; a `ShardEnd` call waits until every rank has one in
    flight (it times out if the dispatcher awaited them one after another)."""

    def __init__(self, ranks: int) -> None:
        self.buffers = [ShardBuffer() for _ in range(ranks)]
        self.got: list[list[str]] = [[] for _ in range(ranks)]
        self.in_flight = 0
        self.all_in_flight = anyio.Event()

    async def send_to(self, role: str, rank: int, msg: Message) -> None:
        self.got[rank].append(type(msg).__name__)
        if isinstance(msg, SampleDispatched):
            self.buffers[rank].add_sample(msg.iteration, msg.sample)
        elif isinstance(msg, GroupAdvantages):
            self.buffers[rank].add_advantages(msg)

    async def call(self, role: str, rank: int, msg: Message, timeout: float = 10.0) -> Message:
        assert isinstance(msg, ShardEnd)
        self.got[rank].append("ShardEnd")
        self.in_flight += 1
        if self.in_flight == len(self.buffers):
            self.all_in_flight.set()
        with anyio.fail_after(5):
            await self.all_in_flight.wait()
        num_tokens = self.buffers[rank].hold(msg)
        return ShardHeld(
            iteration=msg.iteration, rank=rank, num_samples=len(msg.request_ids),
            num_tokens=num_tokens, held_at=0.0,
        )  # fmt: skip


@pytest.mark.anyio
@pytest.mark.parametrize("ranks", [2, 4])
async def test_after_the_last_sample_each_rank_gets_one_end_message_at_once(ranks: int) -> None:
    samples = make_samples(6, 4, seed=ranks)
    mailbox = RecordingRanks(ranks)
    dispatcher = Dispatcher(
        mailbox,  # type: ignore[arg-type]
        ranks, 4, iteration=0, sampling=SAMPLING,
    )  # fmt: skip
    for i, s in enumerate(samples):  # the last one is held back for its rank's end
        await dispatcher.send(sample_data(s), last=i == len(samples) - 1)
    before = [len(g) for g in mailbox.got]
    last_rank = dispatcher.plan.request_ids
    ends = dispatcher.ends()
    riding = [[d.request_id for d in e.samples] for e in ends]
    assert sorted(riding) == [[]] * (ranks - 1) + [[samples[-1].request_id]]
    assert sum(g.count("SampleDispatched") for g in mailbox.got) == len(samples) - 1
    held = await dispatcher.end(timeout_s=5)
    for rank in range(ranks):  # one message per rank when the last sample finished: its end
        assert mailbox.got[rank][before[rank] :] == ["ShardEnd"]
    assert [h.num_samples for h in held] == [len(ids) for ids in last_rank]
    assert [h.num_tokens for h in held] == dispatcher.plan.loads
    # the held shards are what the layout path gives: every sample once, make_batch advantages
    _, expected = dispatch(samples, ranks, 4)
    for rank, buffer in enumerate(mailbox.buffers):
        layout = dispatcher.plan.layout(rank, SAMPLING)
        assert buffer.take(layout) == expected[rank]


def test_shard_end_must_match_what_arrived_and_the_layout_what_was_held() -> None:
    s1, s2 = make_samples(1, 2, seed=3)
    buffer = ShardBuffer()
    buffer.add_sample(0, sample_data(s1))
    ids = (s1.request_id, s2.request_id)

    def end(request_ids: tuple[str, ...]) -> ShardEnd:
        return ShardEnd(
            iteration=0, rank=0, request_ids=request_ids, adv_request_ids=ids,
            advantages=(1.0, -1.0), flat_share=(0.0, 0.0),
        )  # fmt: skip

    with pytest.raises(DispatchError, match="1 samples missing"):
        buffer.hold(end(ids))  # s2 never arrived
    assert buffer.hold(end((s1.request_id,))) == len(s1.completion_ids)
    other = ShardLayout(
        iteration=0, rank=0, request_ids=ids, num_samples=(2,),
        num_tokens=(0,), num_dropped=0, sampling=SAMPLING,
    )  # fmt: skip
    with pytest.raises(DispatchError, match="not the shard held"):
        buffer.take(other)
    shard = buffer.take(dataclasses.replace(other, request_ids=(s1.request_id,)))
    assert shard.samples == (s1,) and shard.advantages == (1.0,)
