"""Weight publication: a versioned state dict to every generator, in bounded buckets.

Each bucket is one `WeightsBucket` call (tensors travel as raw frames, never pickled); the
last bucket of a version commits it, and the generator answers only after swapping, so
when `publish_weights` returns every generator it reached serves the new version. Then the
scheduler is told (`WeightsPublished`, also a call) which version new chunks must carry.

Only live generators are published to: the scheduler names them (`GetLiveGenerators`; it
probes every generator). A generator that fails during publication is skipped, not fatal:
the scheduler hears it `missed` the version and gives it no work until the current weights
reach it: when it answers again, the scheduler asks the trainer to push them to that one
generator (`RepublishWeights`, served by `publish_to`). No live generator at all is not an
error either.

A generator that answers but cannot load the publication refuses it (an error reply; it
keeps serving its old weights): `publish_weights` then raises `WeightsRefused` naming each
refusal. When no generator took the version the scheduler is not told of it (every
generator still serves the old one); when some did, the ones that refused count as missed.
With `rising=True` (the library's `Rollout.update_weights`) a version that is not above the
scheduler's current one is refused (`WeightsError`) before any bucket is sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import structlog
import torch

from actors.base import Mailbox
from actors.model.weight_spec import WeightsError
from transport.errors import RemoteError, TransportError
from transport.messages import (
    Array,
    GetLiveGenerators,
    LiveGenerators,
    WeightsBucket,
    WeightsPublished,
)

log = structlog.get_logger()


class WeightsRefused(RuntimeError):
    """Generators answered but refused a publication (they could not load it) and keep
    serving their old weights; `refused` maps each one's index to its reason."""

    def __init__(self, version: int, refused: Mapping[int, str]) -> None:
        reasons = "; ".join(f"generator {i}: {why}" for i, why in sorted(refused.items()))
        super().__init__(f"weights version {version} refused by {reasons}")
        self.version = version
        self.refused = dict(refused)


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
    rising: bool = False,
) -> tuple[int, ...]:
    """Publish `version` to the generators the scheduler holds live; returns those that
    missed it. Without a scheduler (`notify_scheduler=False`: trainer ranks alone) every
    generator is called and a failure raises. `WeightsRefused` when a generator refused
    it; `rising`: `WeightsError` first unless `version` is above the scheduler's."""
    parts = list(buckets(state, bucket_bytes))
    if not notify_scheduler:
        for index in range(num_generators):
            await _send_parts(mailbox, parts, version, index, timeout_s)
        return ()
    reply = await _ask_live(mailbox, timeout_s)
    if rising and version <= reply.weight_version:
        raise WeightsError(
            f"weights version {version} does not rise: the generators hold version "
            f"{reply.weight_version}, a publication must carry a higher one"
        )
    live = [i for i in reply.instances if 0 <= i < num_generators]
    missed = [i for i in range(num_generators) if i not in live]
    refused: dict[int, str] = {}
    for index in live:
        try:
            await _send_parts(mailbox, parts, version, index, timeout_s)
        except RemoteError as exc:  # it answered: it could not load them, and kept its own
            log.error("weights_refused", generator=index, version=version, error=str(exc))
            refused[index] = str(exc)
        except TransportError as exc:
            log.warning("weights_missed", generator=index, version=version, error=str(exc))
            missed.append(index)
    if refused and len(refused) == len(live):  # nobody took it: the old version stands
        raise WeightsRefused(version, refused)
    published = WeightsPublished(version=version, missed=tuple(sorted([*missed, *refused])))
    await mailbox.call("scheduler", 0, published, timeout_s)
    if refused:
        raise WeightsRefused(version, refused)
    return published.missed


async def publish_to(
    mailbox: Mailbox,
    state: Mapping[str, torch.Tensor],
    version: int,
    index: int,
    *,
    bucket_bytes: int = 16 << 20,
    timeout_s: float = 300.0,
) -> None:
    """Publish `version` to generator `index` alone (one that missed it and came back);
    returns once it has swapped. The scheduler is not notified: it asked, and it checks
    the version the generator then reports."""
    await _send_parts(mailbox, list(buckets(state, bucket_bytes)), version, index, timeout_s)


async def _send_parts(
    mailbox: Mailbox, parts: list[dict[str, Array]], version: int, index: int, timeout_s: float
) -> None:
    for b, tensors in enumerate(parts):
        msg = WeightsBucket(version=version, bucket=b, tensors=tensors, is_last=b == len(parts) - 1)
        await mailbox.call("generator", index, msg, timeout_s)


async def live_generators(mailbox: Mailbox, num_generators: int, timeout_s: float) -> list[int]:
    reply = await _ask_live(mailbox, timeout_s)
    return [i for i in reply.instances if 0 <= i < num_generators]


async def _ask_live(mailbox: Mailbox, timeout_s: float) -> LiveGenerators:
    reply = await mailbox.call("scheduler", 0, GetLiveGenerators(), timeout_s)
    if not isinstance(reply, LiveGenerators):
        raise TransportError(f"scheduler answered GetLiveGenerators with {type(reply).__name__}")
    return reply
