"""A rollout's results reach the driver in bounded messages (issue 34 part 1): the
scheduler cuts them into `RolloutPart`s and a last `RolloutFinished`
(`actors.scheduler.results`), the driver puts them back together. Before, one
`RolloutFinished` carried every sample and every chunk record in one header, refused by the
receiver past `max_header_bytes` after the whole rollout was paid for. Sizes are kept
small by lowering the limits, not by making a huge rollout."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from actors.scheduler.results import ResultPartsError, assemble, result_messages
from pipeline.bench.standin import KIND
from pipeline.config import PipelineConfig, TransportConfig
from pipeline.rollout import Rollout, rollout_config
from transport.codec import CodecLimits, decode, encode
from transport.errors import MessageTooLarge
from transport.messages import (
    ChunkRecord,
    PromptSpec,
    RequestRecord,
    RolloutFinished,
    RolloutPart,
    RolloutRecord,
    SampleResult,
    SamplingSpec,
)

LIMITS = CodecLimits(max_header_bytes=16 << 10)  # 16 KiB: a small rollout is over it


def _rollout(num_samples: int, num_tokens: int, chunks_per_sample: int) -> RolloutFinished:
    samples, chunks, requests = [], [], []
    for i in range(num_samples):
        rid = f"r0:g{i // 4}:s{i % 4};"
        samples.append(
            SampleResult(
                request_id=rid,
                group_id=f"r0:g{i // 4}",
                prompt_id=f"p{i // 4}",
                index=i % 4,
                token_ids=tuple((i + t) % 50 for t in range(num_tokens)),
                logprobs=tuple(-0.25 - t / 1000 for t in range(num_tokens)),
                finish_reason="length",
                weight_versions=(1,) * chunks_per_sample,
                start_s=0.0,
                end_s=1.0 + i,
            )
        )
        requests.append(
            RequestRecord(
                request_id=rid,
                group_id=f"r0:g{i // 4}",
                prompt_id=f"p{i // 4}",
                is_probe=False,
                prompt_len=3,
                output_len=num_tokens,
                arrival_s=0.0,
                finish_s=1.0 + i,
                finish_reason="length",
            )
        )
        chunks += [
            ChunkRecord(
                request_id=rid,
                group_id=f"r0:g{i // 4}",
                instance=c % 2,
                chunk_seq=c,
                dispatched_s=c,
                start_s=c,
                end_s=c + 0.5,
                num_new_tokens=4,
                prompt_len=3,
                generated_before=4 * c,
                num_reprefilled_tokens=0,
                finish_reason="chunk",
            )
            for c in range(chunks_per_sample)
        ]
    record = RolloutRecord(
        policy="context_aware",
        num_instances=2,
        chunks=tuple(chunks),
        requests=tuple(requests),
        instances=(),
        makespan_s=2.5,
    )
    return RolloutFinished(rollout_id="r0", samples=tuple(samples), record=record)


def test_a_rollout_over_one_header_is_sent_in_parts_that_fit_and_come_back_whole() -> None:
    whole = _rollout(num_samples=40, num_tokens=64, chunks_per_sample=8)
    with pytest.raises(MessageTooLarge, match="RolloutFinished: header"):
        encode(whole, LIMITS)  # as one message: refused
    msgs = result_messages("r0", whole.samples, whole.record, None, LIMITS.max_header_bytes)
    assert len(msgs) > 3 and isinstance(msgs[-1], RolloutFinished)
    assert msgs[-1].num_parts == len(msgs) - 1
    received = [decode(encode(m, LIMITS), LIMITS) for m in msgs]  # every one fits
    parts = [m for m in received if isinstance(m, RolloutPart)]
    last = received[-1]
    assert isinstance(last, RolloutFinished)
    # samples, chunk and request records in order (logprobs travel as float32)
    assert assemble(parts, last) == decode(encode(whole))


def test_a_small_rollout_is_one_message_and_a_sample_over_the_limit_goes_alone() -> None:
    small = _rollout(num_samples=2, num_tokens=8, chunks_per_sample=2)
    [only] = result_messages("r0", small.samples, small.record, None, 1 << 20)
    assert only == small
    big = _rollout(num_samples=3, num_tokens=2000, chunks_per_sample=1)  # 16 KB a sample
    msgs = result_messages("r0", big.samples, big.record, None, 4096)
    assert [len(m.samples) for m in msgs[:3]] == [1, 1, 1]
    with pytest.raises(ValueError, match="max_bytes must be positive"):
        result_messages("r0", big.samples, big.record, None, 0)


def test_a_missing_or_reordered_part_is_refused() -> None:
    whole = _rollout(num_samples=40, num_tokens=64, chunks_per_sample=8)
    *parts, last = result_messages("r0", whole.samples, whole.record, None, 16 << 10)
    assert isinstance(last, RolloutFinished)
    ordered = [p for p in parts if isinstance(p, RolloutPart)]
    with pytest.raises(ResultPartsError, match=r"expected parts 0\.\."):
        assemble(ordered[1:], last)
    with pytest.raises(ResultPartsError, match=r"got \[1, 0"):
        assemble([ordered[1], ordered[0], *ordered[2:]], last)


@pytest.mark.anyio
@pytest.mark.timeout(180)
async def test_the_scheduler_sends_a_large_rollout_in_parts_through_real_sockets(
    tmp_path: Path,
) -> None:
    """The real splitter, estimator and scheduler (stand-in generators), the receivers'
    header limit lowered to 1 MiB: a rollout of 64 samples x 64 tokens in chunks of one
    token (4,096 chunk records: a 1.3 MiB header as one message, refused at the driver, and
    the rollout waited for its timeout) comes back whole in parts, every token recorded
    once."""
    cfg = rollout_config(
        num_generators=2,
        chunk_size=1,
        generator_kind=KIND,
        run_dir=str(tmp_path),
        scheduler={"result_message_bytes": 256 << 10},
    )
    config = PipelineConfig(
        topology=cfg.topology,
        transport=TransportConfig(run_dir=str(tmp_path), max_header_mib=1),
        run_id=cfg.run_id,
        ready_timeout_s=300.0,
    )
    prompts = [PromptSpec(prompt_id=f"p{i}", token_ids=(1, i + 2, 3)) for i in range(16)]
    async with Rollout(config) as rollout:
        with anyio.fail_after(120):
            result = await rollout.generate_with_record(prompts, 4, SamplingSpec(max_new_tokens=64))
    samples = [s for g in result.groups for s in g.samples]
    assert len(samples) == 64 and all(len(s.token_ids) == 64 for s in samples)
    assert len(result.record.requests) == 64 and len(result.record.chunks) == 64 * 64
    per_request: dict[str, int] = {}
    for c in result.record.chunks:
        per_request[c.request_id] = per_request.get(c.request_id, 0) + c.num_new_tokens
    assert per_request == {s.request_id: 64 for s in samples}
    whole = RolloutFinished(rollout_id="x", samples=tuple(samples), record=result.record)
    with pytest.raises(MessageTooLarge):  # as one message it would not have passed
        encode(whole, CodecLimits(max_header_bytes=1 << 20))
