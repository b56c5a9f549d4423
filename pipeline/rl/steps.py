"""The driver's side of a single-rank training step: an iteration's samples go to the
trainer in bounded messages (`TrainSamples` calls, then the `TrainStep` with the rest), so
no one message carries a whole rollout, whatever its size."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, Protocol

from transport.messages import (
    Message,
    SamplingSpec,
    TrainReport,
    TrainSamples,
    TrainSampleSpec,
    TrainStep,
)

MESSAGE_BYTES: Final = 16 << 20
"""The packed token bytes (int32 ids, float32 logprobs) one message carries at most; a
sample larger than that travels alone."""
_SAMPLE_OVERHEAD: Final = 256  # a sample's header fields, roughly (ids, reward, versions)


class Caller(Protocol):
    async def call_actor(self, role: str, msg: Message, index: int = 0) -> Message: ...


def sample_bytes(s: TrainSampleSpec) -> int:
    """What one sample costs on the wire, roughly: 4 bytes a token and a logprob."""
    return 4 * (len(s.prompt_ids) + len(s.completion_ids) + len(s.old_logprobs)) + _SAMPLE_OVERHEAD


def batches(
    samples: Sequence[TrainSampleSpec], max_bytes: int = MESSAGE_BYTES
) -> Iterator[tuple[TrainSampleSpec, ...]]:
    """`samples` in order, cut into runs of at most `max_bytes` each (a larger sample alone);
    at least one run, possibly empty."""
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    run: list[TrainSampleSpec] = []
    size = 0
    for s in samples:
        cost = sample_bytes(s)
        if run and size + cost > max_bytes:
            yield tuple(run)
            run, size = [], 0
        run.append(s)
        size += cost
    yield tuple(run)


async def send_train_step(
    caller: Caller,
    iteration: int,
    samples: Sequence[TrainSampleSpec],
    sampling: SamplingSpec,
    max_bytes: int = MESSAGE_BYTES,
) -> TrainReport:
    """Train the trainer on `samples`: every run but the last as a `TrainSamples` call, the
    last in the `TrainStep` (which counts the samples sent ahead); its `TrainReport`."""
    runs = list(batches(samples, max_bytes))
    for run in runs[:-1]:
        await caller.call_actor("trainer", TrainSamples(iteration=iteration, samples=run))
    step = TrainStep(
        iteration=iteration,
        samples=runs[-1],
        sampling=sampling,
        num_sent=len(samples) - len(runs[-1]),
    )
    reply = await caller.call_actor("trainer", step)
    if not isinstance(reply, TrainReport):
        raise TypeError(f"trainer answered a TrainStep with {type(reply).__name__}")
    return reply
