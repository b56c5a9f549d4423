"""Cores of its own for each built-in generator (`GeneratorOptions.pin_cores`).

On a GPU host each generator owns its device; on a CPU host the built-in generators share
the cores, and the kernel moves them between cores mid-rollout, so two processes doing the
same work run at different speeds from one rollout to the next. Pinned, generator ``i``
runs on ``num_threads`` cores of its own, counted on from ``i * num_threads`` over the
cores this process may use (wrapping round when there are more threads than cores).
Measured with `seer sim validate --quick --seeds 3`, two runs each way, alternated on one
2-core host: live makespans spread 18-20% over seeds pinned against 36-51% unpinned
(median over the eight configurations), and the generators' speed over the cost table's
price varied with a coefficient of 0.12-0.14 against 0.16-0.24.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["available", "cores_for", "pin_process", "pinned_thread"]


def available() -> list[int]:
    """The cores this process may run on (every core the OS reports where affinity is not
    supported)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cores_for(index: int, threads: int, cores: list[int] | None = None) -> set[int]:
    """Generator ``index``'s cores: ``threads`` of ``cores`` (default: `available`), from
    ``index * threads`` on, wrapping round."""
    if index < 0 or threads < 1:
        raise ValueError(f"cores_for needs index >= 0 and threads >= 1, got {index}, {threads}")
    pool = available() if cores is None else sorted(cores)
    if not pool:
        raise ValueError("cores_for: no cores to pin to")
    return {pool[(index * threads + k) % len(pool)] for k in range(threads)}


def _supported() -> bool:
    return hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


def pin_process(cores: set[int]) -> bool:
    """Every thread of this process onto ``cores`` (threads started later inherit it from
    the thread that starts them). False where the OS has no per-thread affinity."""
    if not _supported():
        return False
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cores)
    return True


@contextlib.contextmanager
def pinned_thread(cores: set[int] | None) -> Iterator[None]:
    """The calling thread on ``cores`` for the block, then back where it was (None: as is).
    The profile measures a pinned generator's steps so, in the process that runs it."""
    if cores is None or not _supported():
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
