"""Scheduling policies: in which order waiting requests are served, and where they may run.

A policy is a pure object the ``SchedulerCore`` consults (a simulator, planned, can too):
it never mutates requests and never sees sockets or clocks other than the ``now`` it is
given. The core calls ``add`` when a request enters the system, ``remove`` when it leaves the
waiting buffer (picked for a chunk; a finished request is never waiting), ``requeue`` when
it comes back after a chunk or a generator failure, and ``update_estimate`` with a group's
length estimate. ``order`` ranks the waiting requests (most preferred first); ``pin`` may
force an instance. ``chunked`` says whether requests run in chunks of ``chunk_size`` or to
completion; ``bounded_by_capacity`` whether the core enforces slot and KV limits.

A policy whose order is a fixed key per waiting request also gives it as ``rank`` (ties:
the order requests entered the waiting buffer, as ``order``'s stable sort has them). Then the
core keeps the waiting buffer sorted as requests come and go (``WaitingIndex``) instead of
sorting and scanning all of it for every dispatch; ``order`` stays the definition.

Anti-starvation (``starvation_s``, ``starvation_every``): a request that has run at least
one chunk and then waited longer than ``starvation_s`` is starved (``starved`` lists them,
oldest first). The core promotes at most one starved request ahead of ``order`` per
``starvation_every`` dispatches -- relief is occasional, as Seer schedules underserved
groups only now and then; between promotions starved requests keep their place in
``order``. A request that has never run is never starved: its wait since the rollout began
is the policy's choice, not neglect (counting it made every backlogged request "starved"
after ``starvation_s`` and turned context-aware into FIFO).

- ``GroupRoundRobin``: the veRL baseline. Whole groups pinned round-robin by first arrival,
  FIFO, run to completion, no capacity limits (the engine queues and preempts).
- ``Divided``: Seer's divided rollout alone: chunks, FIFO by re-entry time.
- ``ContextAware``: Seer's Algorithm 2 -- probes first (fewest generated first), then the
  rest by descending group estimate; occasional anti-starvation promotions (above).
  ``long_band`` (beyond Seer; 1.0 = Seer's strict order): groups whose estimate is at
  least the generation limit / ``long_band`` share the top rank and are served among
  themselves in FIFO order by re-entry time, as ``Divided`` serves everyone; below the
  band, longest estimate first. An estimate with error (a per-prompt prior is some 15%
  off) that ranks a truly long group under shorter ones makes that group's requests wait
  for KV in the middle of the rollout, and the longest of them sets the makespan; in the
  band no long group waits behind another. `seer sim seer --epochs` measured it
  (docs/simulator.md). ``probe_first`` (``PROBE_FIRST_RULES``): "always" is Seer's (every
  probe ahead of every non-probe, fewest generated first); beyond Seer, a probe not put
  ahead ranks by its group's estimate like its siblings: "unless_prior" puts it ahead
  unless its group had an estimate before any of its requests ran (a prior: nothing can
  have finished yet), so a rollout without priors is ordered as Seer's; "unknown" only
  while its group has no estimate (no prior, no finished sibling); "never" not at all.
- ``Oracle``: longest true remaining length first (true lengths given; comparison only).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from actors.scheduler.state import RequestState

__all__ = [
    "LONG_BAND",
    "POLICY_NAMES",
    "PROBE_FIRST",
    "PROBE_FIRST_RULES",
    "ContextAware",
    "Divided",
    "GroupRoundRobin",
    "Oracle",
    "Policy",
    "make_policy",
]


#: the live default ``long_band`` (``SchedulerOptions``, ``RunConfig``): with a per-prompt
#: prior, context-aware reached divided's throughput or beyond on both KV-bound Seer
#: workloads in `seer sim seer --epochs`, where the strict order (1.0) lost to divided
#: by up to 5% (docs/simulator.md)
LONG_BAND = 2.0

#: when context-aware serves a group's probe ahead of everyone (``ContextAware``)
PROBE_FIRST_RULES = ("always", "unless_prior", "unknown", "never")
#: the live default ``probe_first`` (``SchedulerOptions``, ``RunConfig``): Seer's
PROBE_FIRST = "always"


def _fifo_key(req: RequestState) -> tuple[float, int]:
    return (req.enqueued_at, req.arrival)


class Policy(ABC):
    """Ranks waiting requests; optionally pins them to an instance."""

    name: str = "policy"
    chunked: bool = True
    bounded_by_capacity: bool = True
    ranked: bool = False  # whether ``rank`` gives ``order``'s key
    starvation_s: float | None = None  # started requests waiting longer may be promoted
    starvation_every: int = 1  # at most one promotion per this many dispatches

    def add(self, req: RequestState) -> None:  # noqa: B027 (an optional hook)
        """``req`` entered the system (it is waiting)."""

    def remove(self, req: RequestState) -> None:  # noqa: B027 (an optional hook)
        """``req`` left the waiting buffer (picked for a chunk)."""

    def requeue(self, req: RequestState) -> None:  # noqa: B027 (an optional hook)
        """``req`` is back in the waiting buffer (after a chunk or a generator failure)."""

    def update_estimate(self, group_id: str, estimate: int) -> None:  # noqa: B027 (an optional hook)
        """A new output-length estimate for ``group_id`` (ignored unless the policy uses it)."""

    def length_estimate(self, group_id: str) -> int | None:
        """The group's output-length estimate the policy orders by now (None: it keeps none)."""
        return None

    @abstractmethod
    def order(self, waiting: Sequence[RequestState], now: float) -> Iterable[RequestState]:
        """The waiting requests, most preferred first."""

    def rank(self, req: RequestState) -> tuple[Any, ...]:
        """``order``'s sort key for a waiting request (``ranked``
        policies): fixed while it waits, except through ``update_estimate`` of its group."""
        raise NotImplementedError(f"policy {self.name!r} has no rank")

    def pin(self, req: RequestState) -> int | None:
        """An instance ``req`` must run on, or None to let placement choose (a ``ranked``
        policy never pins)."""
        return None

    def is_starved(self, req: RequestState, now: float) -> bool:
        """Whether ``req`` may be promoted ahead of ``order`` now (anti-starvation)."""
        limit = self.starvation_s
        return limit is not None and req.chunk_seq > 0 and now - req.enqueued_at > limit

    def starved(self, waiting: Sequence[RequestState], now: float) -> list[RequestState]:
        """The starved waiting requests, oldest first (promotion candidates)."""
        return sorted((r for r in waiting if self.is_starved(r, now)), key=_fifo_key)


class GroupRoundRobin(Policy):
    name = "baseline"
    chunked = False
    bounded_by_capacity = False

    def __init__(self, num_instances: int) -> None:
        if num_instances < 1:
            raise ValueError(f"num_instances must be >= 1, got {num_instances}")
        self.num_instances = num_instances
        self._group_instance: dict[str, int] = {}

    def add(self, req: RequestState) -> None:
        if req.group_id not in self._group_instance:
            self._group_instance[req.group_id] = len(self._group_instance) % self.num_instances

    def order(self, waiting: Sequence[RequestState], now: float) -> Iterable[RequestState]:
        return sorted(waiting, key=lambda r: (r.arrival, r.enqueued_at))

    def pin(self, req: RequestState) -> int | None:
        return self._group_instance.get(req.group_id)


class Divided(Policy):
    name = "divided"
    ranked = True

    def rank(self, req: RequestState) -> tuple[Any, ...]:
        return _fifo_key(req)

    def order(self, waiting: Sequence[RequestState], now: float) -> Iterable[RequestState]:
        return sorted(waiting, key=_fifo_key)


class ContextAware(Policy):
    name = "context_aware"
    ranked = True
    starvation_s: float

    def __init__(
        self,
        max_new_tokens: int,
        starvation_s: float = 5.0,
        starvation_every: int = 8,
        long_band: float = 1.0,
        probe_first: str = "always",
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not long_band >= 1.0:
            raise ValueError(f"long_band must be >= 1, got {long_band}")
        if probe_first not in PROBE_FIRST_RULES:
            raise ValueError(f"probe_first must be one of {PROBE_FIRST_RULES}, got {probe_first!r}")
        if starvation_s <= 0:
            raise ValueError(f"starvation_s must be > 0, got {starvation_s}")
        if starvation_every < 1:
            raise ValueError(f"starvation_every must be >= 1, got {starvation_every}")
        self.max_new_tokens = max_new_tokens
        self.starvation_s = starvation_s
        self.starvation_every = starvation_every
        self.long_band = long_band
        self.probe_first = probe_first
        # estimates at or above this share the top rank (FIFO among them)
        self._band_floor = max_new_tokens / long_band
        self._estimates: dict[str, int] = {}
        self._started: set[str] = set()  # groups with a request picked for a chunk
        self._with_prior: set[str] = set()  # groups estimated before any request ran

    def remove(self, req: RequestState) -> None:
        self._started.add(req.group_id)

    def update_estimate(self, group_id: str, estimate: int) -> None:
        self._estimates[group_id] = estimate
        if group_id not in self._started:
            self._with_prior.add(group_id)

    def estimate(self, group_id: str) -> int:
        """L[g]: the longest finished sibling, or the generation limit before any finished."""
        return self._estimates.get(group_id, self.max_new_tokens)

    def length_estimate(self, group_id: str) -> int | None:
        return self.estimate(group_id)

    def has_estimate(self, group_id: str) -> bool:
        """Whether the group has an estimate (a prior or a finished sibling), not the limit
        by default."""
        return group_id in self._estimates

    def is_probe_first(self, req: RequestState) -> bool:
        """Whether ``req`` is a probe served ahead of everyone (``probe_first``)."""
        rule = self.probe_first
        if not req.is_probe or rule == "never":
            return False
        if rule == "unless_prior":
            return req.group_id not in self._with_prior
        return rule == "always" or not self.has_estimate(req.group_id)

    def rank(self, req: RequestState) -> tuple[Any, ...]:
        if self.is_probe_first(req):
            return (0, req.generated, *_fifo_key(req))
        estimate = self.estimate(req.group_id)
        if estimate >= self._band_floor:  # the long band: one rank, FIFO inside
            estimate = self.max_new_tokens
        return (1, -estimate, *_fifo_key(req))

    def order(self, waiting: Sequence[RequestState], now: float) -> Iterable[RequestState]:
        return sorted(waiting, key=self.rank)


class Oracle(Policy):
    name = "oracle"
    ranked = True

    def __init__(self, true_lengths: Mapping[str, int]) -> None:
        self.true_lengths = dict(true_lengths)

    def add(self, req: RequestState) -> None:
        if req.request_id not in self.true_lengths:
            raise KeyError(f"Oracle policy has no true length for request {req.request_id!r}")

    def rank(self, req: RequestState) -> tuple[Any, ...]:
        return (req.generated - self.true_lengths[req.request_id], *_fifo_key(req))

    def order(self, waiting: Sequence[RequestState], now: float) -> Iterable[RequestState]:
        return sorted(waiting, key=self.rank)


POLICY_NAMES = ("baseline", "divided", "context_aware", "oracle")


def make_policy(
    name: str,
    *,
    num_instances: int,
    max_new_tokens: int,
    true_lengths: Mapping[str, int] | None = None,
    starvation_s: float = 5.0,
    starvation_every: int = 8,
    long_band: float = 1.0,
    probe_first: str = "always",
) -> Policy:
    """A policy by its name: one of ``POLICY_NAMES`` (``long_band``, ``probe_first``:
    context-aware's, ``ContextAware``)."""
    if name == "baseline":
        return GroupRoundRobin(num_instances)
    if name == "divided":
        return Divided()
    if name == "context_aware":
        return ContextAware(max_new_tokens, starvation_s, starvation_every, long_band, probe_first)
    if name == "oracle":
        if true_lengths is None:
            raise ValueError("the 'oracle' policy needs true_lengths")
        return Oracle(true_lengths)
    raise ValueError(f"unknown policy {name!r}; valid names: {', '.join(POLICY_NAMES)}")
