"""Adaptive speculation where drafts do not pay costs (nearly) nothing: drafted steps whose
realized speed-up is below 1 turn their batch-size class off (`MarginalBenefitPolicy.losing`),
the speculator then does no drafting work and its draft sync does not pull, and when
drafting turns back on (a probe) the sync catches up at once. Samples stay those of plain
decoding throughout."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import structlog

from actors.base import Mailbox
from actors.drafts import measured
from actors.drafts.client import DraftClient
from actors.drafts.options import SpecConfig
from actors.drafts.policy import MAX_EXPLORE_BACKOFF, MarginalBenefitPolicy
from actors.drafts.suffix_tree import SpecResult
from actors.generator import ChunkRequest, SamplingParams
from actors.generator.builtin import EngineConfig, TorchEngine
from actors.generator.draft_sync import LIVENESS_CYCLES, DraftSync
from actors.generator.speculator import RECENT_STEPS, Speculator
from actors.model import LlamaModel, ModelOptions
from tests.actors.test_draft_policy import cheap, costly, drive, trusted
from tests.actors.test_draft_sync import PROMPT, opened, store_config
from tests.pipeline.tiny import TINY_GENERATOR
from transport.messages import TokenAppend, TokensAppended


def test_drafted_steps_that_realize_a_loss_turn_their_batch_class_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The measured cost held at the profile's (so only what drafted steps realized can
    tell): the budget keeps predicting gains, the realized speed-ups say otherwise, and its
    batch class goes off, within 3% of no speculation; other classes are untouched; when
    steps cost what the profile says again, the probes measure a gain and it comes back."""
    monkeypatch.setattr(measured.MeasuredCost, "cost_factor", property(lambda self: 1.0))
    policy = MarginalBenefitPolicy(SpecConfig(), cheap, padded=True)
    trusted(policy, 0.9)
    drive(policy, 100, costly)
    assert policy.losing(16) and not policy.losing(2) and not policy.losing(64)
    speedup = policy.realized_speedup(16)
    assert speedup is not None and speedup < 0.8
    ratio, drafted = drive(policy, 3000, costly)
    assert ratio >= 0.97 and drafted < 0.01  # a probe now and then
    assert policy.explore_interval == SpecConfig().explore_every * MAX_EXPLORE_BACKOFF
    drive(policy, 1000, cheap)
    ratio, drafted = drive(policy, 500, cheap)
    assert not policy.losing(16) and drafted > 0.95 and ratio > 1.5


class CountingSource(DraftClient):
    """The live client, counting the tree lookups the speculator makes."""

    def __init__(self) -> None:
        super().__init__("group")
        self.lookups = 0

    def speculate(
        self, request_id: str, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult | None:
        self.lookups += 1
        return super().speculate(
            request_id, max_tokens=max_tokens, top_k_paths=top_k_paths, min_prob=min_prob
        )


def test_an_off_class_does_no_drafting_work_and_samples_stay_plain() -> None:
    """A real engine whose drafted steps take 5x a plain one (the clock replaced by fixed
    seconds): after the first few, the speculator stops looking drafts up but for the
    probes, each of which asks for a catch-up (`on_resume`) without turning the sync's full
    rate back on; samples are plain decoding's."""
    model = LlamaModel.random(ModelOptions(**TINY_GENERATOR["model"]).config(), seed=0)
    cfg = EngineConfig(max_batch=8, profile=False, num_threads=1)
    prompt = tuple(range(5, 14))

    def run(spec: Speculator | None) -> tuple[dict[str, tuple[int, ...]], list[int]]:
        engine = TorchEngine(model, cfg)
        out: dict[str, tuple[int, ...]] = {}
        for i in range(6):
            params = SamplingParams(temperature=0.0 if i < 3 else 1.0, seed=i, ignore_eos=True)
            engine.add(ChunkRequest(f"r{i}", prompt, 300, params=params))
            if spec is not None:
                spec.start(f"r{i}", "g", 0, prompt, (), is_probe=False)
        lookups: list[int] = []  # per decode step of all six rows
        while engine.has_work():
            decoding = engine.decoding_request_ids()
            if spec is None:
                result = engine.step()
            else:
                assert isinstance(spec.client, CountingSource)
                before = spec.client.lookups
                drafts = spec.drafts(decoding)
                result = engine.step(drafts)
                spec.observe(result, decoding, seconds=5.0 if drafts else 1.0, plain_seconds=1.0)
                if len(decoding) == 6:
                    lookups.append(spec.client.lookups - before)
            out.update({c.request_id: c.token_ids for c in result.finished})
        return out, lookups

    source = CountingSource()
    spec = Speculator(SpecConfig(mode="group"), lambda b, g: 1.0, padded=True, source=source)
    resumes: list[int] = []
    spec.on_resume = lambda: resumes.append(len(resumes))
    assert isinstance(spec.policy, MarginalBenefitPolicy)
    trusted(spec.policy, 0.9)  # drafts predicted to pay
    samples, lookups = run(spec)
    assert samples == run(None)[0]
    assert spec.policy.losing(6)
    late = lookups[len(lookups) // 2 :]  # long after it turned off
    assert sum(1 for n in late if n) <= len(late) // 16 + 1  # probes only
    # a probe after a pause asks the sync to catch up first (`on_resume`, which the sync
    # does at most every 2 s); it does not make the sync run at full rate: that follows
    # the budget's own grants, of which there are none once the class is off
    drafted = sum(1 for n in lookups if n)
    assert 1 <= len(resumes) == spec.num_resumes <= drafted < len(lookups) // 8
    assert not spec.drafted_lately


@pytest.mark.anyio
async def test_while_off_the_sync_does_not_pull_and_catches_up_when_drafting_resumes(
    tmp_path: Path,
) -> None:
    """The real store, in process; syncs every 2 ms. While the speculator is off (no step
    drafts) the sync pulls only every `LIVENESS_CYCLES` cycles; a sibling's tokens that
    reached the store meanwhile are in the replica right after drafting resumes."""
    from pipeline.launch import launch_inprocess

    async with launch_inprocess(store_config(tmp_path)) as cluster:
        mailbox: Mailbox = cluster.mailbox
        await cluster.send("drafts", 0, opened("r1", "r1:g0"))
        spec = Speculator(SpecConfig(budget="fixed", sync_interval_s=0.001), lambda b, g: 1.0)
        assert isinstance(spec.client, DraftClient)
        sync = DraftSync(spec, mailbox, structlog.get_logger())
        spec.start("a", "r1:g0", 0, PROMPT, (), is_probe=False)
        sync.wake()  # a new group, before any step decided: pulled at once
        spec.steps_off = RECENT_STEPS  # then steps at a batch size where drafts do not pay
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sync.run)
                while not spec.client.store_id:  # the new group's pull
                    await anyio.sleep(0.001)
                pulls, cycles = sync.num_pulls, sync.num_cycles
                while sync.num_cycles < cycles + 3 * LIVENESS_CYCLES:
                    spec.client.extend("a", [7])  # decoding, not drafting
                    await anyio.sleep(0.001)
                assert sync.num_pulls - pulls <= 4  # liveness pulls only
                sibling = TokenAppend(
                    group_id="r1:g0", request_id="b", chunk_seq=0, start=0, token_ids=(1, 2, 3)
                )
                await cluster.send("drafts", 0, TokensAppended(appends=(sibling,)))
                replica = spec.client.replicas["r1:g0"]
                spec.drafts(["a"])  # drafting resumes: `on_resume` wakes the sync
                assert spec.num_resumes == 1
                while "b" not in replica.seqs:
                    await anyio.sleep(0.001)
                tg.cancel_scope.cancel()
        assert replica.seqs["b"].tokens == [1, 2, 3]
