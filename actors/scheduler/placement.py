"""Placement: which instance runs a request's next chunk.

``select_instance`` reads per-instance load (``InstanceLoad`` telemetry or the core's
``ProjectedLoad``) and returns an instance index, or None when no candidate has capacity.
Among instances with capacity it prefers the request's ``kv_instance`` (it still holds the
request's KV, so the chunk needs no re-prefill) unless that instance's in-flight count
exceeds the least-loaded one's by more than ``affinity_spread`` (Seer, OSDI version: cache
affinity while load is balanced, least-loaded once the spread passes a threshold).
Otherwise: fewest in flight, then lowest KV fraction, then lowest index.

Capacity: a free slot (``num_running < max_running``) and the request's KV need fitting
under ``kv_high_watermark * kv_tokens_total`` -- except on an idle instance (nothing in flight),
which always takes one request: parked KV is evictable, and an over-large request must
still run somewhere, so the KV limit can never stall the rollout. Pure functions, no state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from actors.scheduler.state import RequestState

__all__ = ["LoadView", "has_capacity", "select_instance"]


class LoadView(Protocol):
    """What placement reads from an instance's load (``InstanceLoad``, ``ProjectedLoad``)."""

    @property
    def index(self) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def kv_tokens_used(self) -> int: ...
    @property
    def kv_tokens_total(self) -> int: ...
    @property
    def max_running(self) -> int: ...


def has_capacity(load: LoadView, kv_need: int = 0, kv_high_watermark: float = 1.0) -> bool:
    """A free slot, and ``kv_need`` more KV tokens fit under the watermark (or it is idle)."""
    if load.num_running >= load.max_running:
        return False
    if load.num_running == 0:
        return True
    return load.kv_tokens_used + kv_need <= kv_high_watermark * load.kv_tokens_total


def need_on(req: RequestState, instance: int, kv_need: int, kv_resident: int) -> int:
    """KV a chunk adds on `instance`: the instance that holds the request's context (it was
    parked there) only needs room for the new tokens."""
    return kv_need - kv_resident if instance == req.kv_instance else kv_need


def _load_key(load: LoadView) -> tuple[int, float, int]:
    kv_fraction = load.kv_tokens_used / load.kv_tokens_total if load.kv_tokens_total > 0 else 1.0
    return (load.num_running, kv_fraction, load.index)


def select_instance(
    req: RequestState,
    candidates: Sequence[LoadView],
    affinity_spread: int,
    *,
    kv_need: int = 0,
    kv_high_watermark: float = 1.0,
    check_capacity: bool = True,
    kv_resident: int = 0,
) -> int | None:
    """The instance for ``req``'s next chunk, or None if no candidate has capacity.

    ``check_capacity=False`` treats every candidate as having room (policies whose engines
    queue and preempt on their own, like the veRL baseline).
    """
    fits = [
        c
        for c in candidates
        if not check_capacity
        or has_capacity(c, need_on(req, c.index, kv_need, kv_resident), kv_high_watermark)
    ]
    if not fits:
        return None
    least = min(fits, key=_load_key)
    home = next((c for c in candidates if c.index == req.kv_instance), None)
    if home is not None and home.num_running - least.num_running <= affinity_spread:
        # stay where the KV is; if it has no room right now, wait for it rather than move
        # and pay a re-prefill (moving is for load imbalance past the spread)
        return home.index if home in fits else None
    return least.index
