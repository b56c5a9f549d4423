"""Weight publication: a versioned state dict to every generator, in bounded buckets.

Each bucket is one `WeightsBucket` call (tensors travel as raw frames, never pickled); the
last bucket of a version commits it, and the generator answers only after swapping, so
when `publish_weights` returns every generator serves the new version. Then the scheduler
is told (`WeightsPublished`, also a call) which version new chunks must carry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from actors.base import Mailbox
from transport.messages import Array, WeightsBucket, WeightsPublished


def buckets(state: Mapping[str, torch.Tensor], limit: int) -> Iterator[dict[str, Array]]:
    """`state` cut into dicts of at most `limit` bytes (a larger tensor travels alone)."""
    bucket: dict[str, Array] = {}
    size = 0
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        if bucket and size + t.nbytes > limit:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = t
        size += t.nbytes
    yield bucket


async def publish_weights(
    mailbox: Mailbox,
    state: Mapping[str, torch.Tensor],
    version: int,
    *,
    num_generators: int,
    bucket_bytes: int = 16 << 20,
    timeout_s: float = 300.0,
    notify_scheduler: bool = True,
) -> None:
    parts = list(buckets(state, bucket_bytes))
    for index in range(num_generators):
        for b, tensors in enumerate(parts):
            msg = WeightsBucket(
                version=version, bucket=b, tensors=tensors, is_last=b == len(parts) - 1
            )
            await mailbox.call("generator", index, msg, timeout_s)
    if notify_scheduler:  # a topology without a scheduler (trainer ranks alone) skips it
        await mailbox.call("scheduler", 0, WeightsPublished(version=version), timeout_s)
