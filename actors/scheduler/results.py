"""A rollout's results on their way to the driver in bounded messages: `result_messages`
cuts the samples and the record's chunk and request records into `RolloutPart`s of at most
`max_bytes` each (by the rough cost the driver's `TrainSamples` use: 4 bytes a token and a
logprob, plus what a sample's or a record's fields take in the header), then the `RolloutFinished`
with the rest; `assemble` puts them back together on the driver's side, checking that
every part came, in order."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final, TypeVar

from transport.messages import (
    ChunkRecord,
    RequestRecord,
    RolloutFinished,
    RolloutPart,
    RolloutRecord,
    SampleResult,
    StreamSummary,
)

# header bytes, a little above what msgpack takes (measured: a sample with 16 chunk
# versions 218, a chunk record 299, a request record 161): a message whose cost is within
# the receiver's `max_header_bytes` has a header within it
SAMPLE_OVERHEAD: Final = 256  # plus 3 a chunk version
CHUNK_BYTES: Final = 320
REQUEST_BYTES: Final = 192
T = TypeVar("T", SampleResult, ChunkRecord, RequestRecord)
Item = SampleResult | ChunkRecord | RequestRecord


class ResultPartsError(ValueError):
    """The driver got a rollout's parts out of order, or not all of them."""


def sample_cost(s: SampleResult) -> int:
    return 4 * (len(s.token_ids) + len(s.logprobs)) + SAMPLE_OVERHEAD + 3 * s.num_chunks


def _cost(item: Item) -> int:
    if isinstance(item, SampleResult):
        return sample_cost(item)
    return CHUNK_BYTES if isinstance(item, ChunkRecord) else REQUEST_BYTES


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
    items: list[Item] = [*samples, *record.chunks, *record.requests]
    runs: list[list[Item]] = [[]]
    size = 0
    for item in items:
        cost = _cost(item)
        if runs[-1] and size + cost > max_bytes:
            runs.append([])
            size = 0
        runs[-1].append(item)
        size += cost
    out: list[RolloutPart | RolloutFinished] = [
        RolloutPart(
            rollout_id=rollout_id,
            seq=i,
            samples=_of(run, SampleResult),
            chunks=_of(run, ChunkRecord),
            requests=_of(run, RequestRecord),
        )
        for i, run in enumerate(runs[:-1])
    ]
    last = runs[-1]
    rest = dataclasses.replace(
        record, chunks=_of(last, ChunkRecord), requests=_of(last, RequestRecord)
    )
    finished = RolloutFinished(
        rollout_id=rollout_id,
        samples=_of(last, SampleResult),
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
    requests = tuple(r for p in parts for r in p.requests) + finished.record.requests
    record = dataclasses.replace(finished.record, chunks=chunks, requests=requests)
    return dataclasses.replace(finished, samples=samples, record=record, num_parts=0)


def _of(run: Sequence[Item], kind: type[T]) -> tuple[T, ...]:
    return tuple(x for x in run if isinstance(x, kind))
