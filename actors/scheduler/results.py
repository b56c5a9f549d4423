"""A rollout's results on their way to the driver in bounded messages: `result_messages`
cuts the samples and the record's chunk records into `RolloutPart`s of at most
`max_bytes` each (by the same rough cost the driver's `TrainSamples` use: 4 bytes a token
and a logprob, plus a fixed cost a sample or a chunk record), then the `RolloutFinished`
with the rest; `assemble` puts them back together on the driver's side, checking that
every part came, in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from transport.messages import (
    ChunkRecord,
    RolloutFinished,
    RolloutPart,
    RolloutRecord,
    SampleResult,
    StreamSummary,
)

SAMPLE_OVERHEAD: Final = 256  # a sample's header fields, roughly (ids, reason, versions)
CHUNK_BYTES: Final = 160  # one chunk record in the header, roughly


class ResultPartsError(ValueError):
    """The driver got a rollout's parts out of order, or not all of them."""


def sample_cost(s: SampleResult) -> int:
    return 4 * (len(s.token_ids) + len(s.logprobs)) + SAMPLE_OVERHEAD


def result_messages(
    rollout_id: str,
    samples: Sequence[SampleResult],
    record: RolloutRecord,
    stream: StreamSummary | None,
    max_bytes: int,
) -> list[RolloutPart | RolloutFinished]:
    """The messages that carry a rollout's results, each at most `max_bytes` by the rough
    cost (a larger sample travels alone), the `RolloutFinished` last."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    items: list[SampleResult | ChunkRecord] = [*samples, *record.chunks]
    runs: list[list[SampleResult | ChunkRecord]] = [[]]
    size = 0
    for item in items:
        cost = sample_cost(item) if isinstance(item, SampleResult) else CHUNK_BYTES
        if runs[-1] and size + cost > max_bytes:
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += cost
    out: list[RolloutPart | RolloutFinished] = [
        RolloutPart(rollout_id=rollout_id, seq=i, samples=_samples(run), chunks=_chunks(run))
        for i, run in enumerate(runs[:-1])
    ]
    last = runs[-1]
    rest = dataclasses.replace(record, chunks=_chunks(last))
    finished = RolloutFinished(
        rollout_id=rollout_id,
        samples=_samples(last),
        record=rest,
        stream=stream,
        num_parts=len(out),
    )
    return [*out, finished]


def assemble(parts: Sequence[RolloutPart], finished: RolloutFinished) -> RolloutFinished:
    """The whole `RolloutFinished` from its parts (as they came) and its last message."""
    seqs = [p.seq for p in parts if p.rollout_id == finished.rollout_id]
    if seqs != list(range(finished.num_parts)):
        raise ResultPartsError(
            f"rollout {finished.rollout_id}: expected parts 0..{finished.num_parts - 1} "
            f"before RolloutFinished, got {seqs}"
        )
    if not parts:
        return finished
    samples = tuple(s for p in parts for s in p.samples) + finished.samples
    chunks = tuple(c for p in parts for c in p.chunks) + finished.record.chunks
    record = dataclasses.replace(finished.record, chunks=chunks)
    return dataclasses.replace(finished, samples=samples, record=record, num_parts=0)


def _samples(run: Sequence[SampleResult | ChunkRecord]) -> tuple[SampleResult, ...]:
    return tuple(x for x in run if isinstance(x, SampleResult))


def _chunks(run: Sequence[SampleResult | ChunkRecord]) -> tuple[ChunkRecord, ...]:
    return tuple(x for x in run if isinstance(x, ChunkRecord))
