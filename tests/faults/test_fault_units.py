"""Audit findings of issue 15 part 3 that live in pure cores: each test failed before its fix.

- the trainer's new logprobs use the rollout's sampling transform (T=0.7 with top-p: the
  first importance ratio is 1, where the untransformed distribution gives another value);
- the draft client recovers a lost append and resynchronises with a restarted store;
- samples that ended in "error" are dropped from the training batch and counted;
- `--policy oracle` is refused in an RL run.
"""

from __future__ import annotations

import copy

import anyio
import pytest

from actors.base import ActorContext
from actors.drafts.client import DraftClient
from actors.drafts.store import DraftStore
from actors.estimator.actor import LengthEstimatorActor
from actors.estimator.options import EstimatorOptions
from actors.generator import ChunkRequest, Draft, SamplingParams
from actors.model import LlamaModel
from actors.trainer import GRPOTrainer, TrainSample
from actors.trainer.core import SamplingTransform
from pipeline.rl.config import RunConfig
from pipeline.rl.loop import trainable
from pipeline.rollout.api import Group
from tests.actors.engine_util import drive, make_engine, tiny_model
from transport.inproc import InprocHub, InprocTransport
from transport.messages import (
    EstimateUpdated,
    GroupInfo,
    GroupsOpened,
    RequestFinished,
    SampleResult,
    TokensAppended,
    TrainSampleSpec,
)

# --- the trainer computes new logprobs under the sampling transform -------------------------

T, TOP_P = 0.7, 0.8


def _rollout_samples() -> list[TrainSample]:
    """Four samples of one group drawn by the real engine at T=0.7, top-p 0.8."""
    model = tiny_model(seed=3)
    engine = make_engine(model)
    prompt = (1, 2, 3, 4)
    reqs = [
        ChunkRequest(f"r{i}", prompt, 12, params=SamplingParams(temperature=T, top_p=TOP_P, seed=i))
        for i in range(4)
    ]
    run = drive(engine, reqs)
    return [
        TrainSample(
            prompt_ids=prompt,
            completion_ids=run.results[r.request_id].token_ids,
            old_logprobs=run.results[r.request_id].logprobs,
            reward=float(i % 2),
            group_id="g",
            weight_versions=(0,),
            request_id=r.request_id,
        )
        for i, r in enumerate(reqs)
    ]


def _first_ratio(samples: list[TrainSample], transform: SamplingTransform | None) -> float:
    trainer = GRPOTrainer(_clone(tiny_model(seed=3)), lr=1e-3)
    stats = trainer.step(samples, sampling=transform)
    return stats["mean_ratio"]


def _clone(model: LlamaModel) -> LlamaModel:
    return copy.deepcopy(model).train()


def test_first_importance_ratio_is_one_under_the_rollouts_transform() -> None:
    samples = _rollout_samples()
    assert any(len(s.completion_ids) > 2 for s in samples)
    ratio = _first_ratio(samples, SamplingTransform(temperature=T, top_p=TOP_P))
    assert ratio == pytest.approx(1.0, abs=1e-5)
    # the old behaviour (temperature 1, no top-p) is measurably off: the check can fail
    assert abs(_first_ratio(samples, None) - 1.0) > 1e-3


def test_perfect_drafts_are_all_accepted_at_temperature_one() -> None:
    """Verification at T=1 couples the draft with the coin plain decoding would use: a
    draft of exactly what plain sampling emits is always accepted (so a sampled rollout
    that accepts nothing has drafts that disagree with the policy, not a broken verifier)."""
    model = tiny_model(seed=1)
    reqs = [
        ChunkRequest(f"r{i}", (1, 2, 3), 24, params=SamplingParams(temperature=1.0, seed=i))
        for i in range(3)
    ]
    truth = {rid: r.token_ids for rid, r in drive(make_engine(model), reqs).results.items()}

    def perfect(rid: str, context: list[int]) -> Draft | None:
        done = len(context) - 3
        return Draft.chain(truth[rid][done : done + 4]) if done < len(truth[rid]) else None

    run = drive(make_engine(model), reqs, perfect)
    assert {rid: r.token_ids for rid, r in run.results.items()} == truth
    drafted = sum(r.num_draft_tokens for r in run.results.values())
    assert drafted > 0
    assert sum(r.num_accepted_tokens for r in run.results.values()) == drafted


# --- the draft client recovers lost appends and a restarted store ---------------------------


def _client_with_tokens(tokens: list[int]) -> DraftClient:
    client = DraftClient("group")
    client.start("r0", "g", 0, (7, 8, 9), ())
    client.extend("r0", tokens)
    return client


def _sync(client: DraftClient, store: DraftStore) -> None:
    for a in client.take_appends():
        store.append(a)
    request = client.sync_message()
    assert request is not None
    client.apply(store.sync(request))


def test_a_lost_append_is_sent_again() -> None:
    store = DraftStore()
    store.open_groups("r", [GroupInfo(group_id="g", prompt_id="p", size=2, prompt_tail=(7, 8, 9))])
    client = _client_with_tokens([1, 2, 3])
    lost = client.take_appends()  # queued, then lost on the way (a dead peer's queue)
    assert lost and lost[0].start == 0
    client.extend("r0", [4, 5])
    _sync(client, store)  # the store refuses the gap; its answer says it holds nothing
    _sync(client, store)  # so the client sends everything again from its own copy
    assert store.groups["g"].seqs["r0"].tokens == [1, 2, 3, 4, 5]
    assert client.counters["resent_appends"] >= 1


def test_an_append_dropped_at_a_full_queue_is_rewound() -> None:
    store = DraftStore()
    client = _client_with_tokens([1, 2])
    client.rewind(client.take_appends())  # the offer was refused
    client.extend("r0", [3])
    for a in client.take_appends():
        assert store.append(a) == "applied"
    assert store.groups["g"].seqs["r0"].tokens == [1, 2, 3]


def test_a_restarted_store_is_refilled_and_replicas_replay_its_log() -> None:
    store = DraftStore()
    info = [GroupInfo(group_id="g", prompt_id="p", size=2, prompt_tail=(7, 8, 9))]
    store.open_groups("r", info)
    writer = _client_with_tokens([1, 2, 3, 4])
    reader = DraftClient("group")
    reader.start("r1", "g", 0, (7, 8, 9), ())
    _sync(writer, store)
    _sync(reader, store)
    assert reader.replicas["g"].seqs["r0"].tokens == [1, 2, 3, 4]
    old_version = reader.replicas["g"].version

    store = DraftStore()  # restarted: empty, another id
    store.open_groups("r", info)
    writer.extend("r0", [5, 6])
    _sync(writer, store)  # refused as a gap, and the answer shows the store holds nothing
    _sync(writer, store)  # re-sent from the writer's own copy
    assert store.groups["g"].seqs["r0"].tokens == [1, 2, 3, 4, 5, 6]
    assert len(store.groups["g"].log) < old_version + 2  # the new log is short: cursor resets
    _sync(reader, store)
    assert reader.replicas["g"].seqs["r0"].tokens == [1, 2, 3, 4, 5, 6]
    assert reader.counters["store_changes"] == 1


# --- error samples are not trained on; oracle is refused in RL ------------------------------


def _sample(i: int, reason: str) -> SampleResult:
    return SampleResult(
        request_id=f"r{i}", group_id="g", prompt_id="p", index=i, token_ids=(1,),
        logprobs=(-0.1,), finish_reason=reason, weight_versions=(0,), start_s=0.0, end_s=1.0,
    )  # fmt: skip


def test_error_samples_are_dropped_and_counted() -> None:
    results = (_sample(0, "stop"), _sample(1, "error"), _sample(2, "length"))
    specs = tuple(_spec(s) for s in results)
    kept, dropped = trainable(specs, [Group("p", results)])
    assert dropped == 1
    assert [s.reward for s in kept] == [0.0, 2.0]


def _spec(s: SampleResult) -> TrainSampleSpec:
    return TrainSampleSpec(
        prompt_ids=(1,), completion_ids=s.token_ids, old_logprobs=s.logprobs,
        reward=float(s.index), group_id="g", weight_versions=(0,),
    )  # fmt: skip


def test_oracle_is_refused_in_an_rl_run() -> None:
    with pytest.raises(ValueError, match="oracle"):
        RunConfig(policy="oracle")


def test_tokens_appended_type_is_what_the_sync_offers() -> None:
    # the generator's sync offers TokensAppended batches (one-way, best effort)
    client = _client_with_tokens([1])
    msg = TokensAppended(appends=client.take_appends())
    assert msg.appends[0].token_ids == (1,)


# --- use_prior reaches the scheduler ------------------------------------------------------


@pytest.mark.anyio
async def test_use_prior_sends_the_prior_when_a_group_opens() -> None:
    """The estimator's shell, over in-process channels, with the scheduler's inbox read
    directly: with `use_prior`, reopening a prompt's group sends its prior at once (before
    the fix the option changed nothing the scheduler saw); without it, nothing is sent."""
    for use_prior, expected in ((True, [5]), (False, [])):
        hub = InprocHub()
        transport = InprocTransport(hub)
        inbox = transport.reply("inproc://t/scheduler-0", bind=True)
        ctx = ActorContext(
            role="estimator",
            index=0,
            address="inproc://t/estimator-0",
            address_of=lambda role, i: f"inproc://t/{role}-{i}",
            transport=transport,
            options=EstimatorOptions(use_prior=use_prior),
        )
        actor = LengthEstimatorActor(ctx)
        group = GroupInfo(group_id="g1", prompt_id="p", size=1)
        await actor.handle_groups_opened(
            GroupsOpened(rollout_id="r1", groups=(group,), generation_limit=50)
        )
        done = RequestFinished(rollout_id="r1", group_id="g1", request_id="x", output_len=5)
        await actor.handle_request_finished(done)
        first = await inbox.recv()  # the estimate of the finished group
        assert isinstance(first.msg, EstimateUpdated) and first.msg.estimate == 5
        again = GroupInfo(group_id="g2", prompt_id="p", size=1)
        await actor.handle_groups_opened(
            GroupsOpened(rollout_id="r2", groups=(again,), generation_limit=50)
        )
        got = []
        with anyio.move_on_after(0.5):
            msg = (await inbox.recv()).msg
            assert isinstance(msg, EstimateUpdated) and msg.rollout_id == "r2"
            got.append(msg.estimate)
        assert got == expected
        transport.close()
