"""How many draft tokens each running request gets in one verify step.

`MarginalBenefitPolicy` is Seer's Algorithm 1 (MBA) on measured numbers, with the
acceptance estimated per draft node instead of per class:
1. Each running request's suffix tree proposes up to g_max nodes with their path
   probabilities p (the chance the node is accepted); a measured calibration factor c
   (tokens accepted over tokens predicted, decayed) corrects the trees' optimism.
2. Nodes are ranked: every probe's first node first (Seer: probes get one token before
   anyone), then by marginal gain, p times lambda for probes (their early finish steers
   scheduling), at most g_max per request.
3. The budget is the number n of ranked nodes that maximises expected tokens per second,
   (B + c * sum p) / T(B, n / B), with T the engine's profiled verify-step time. When every
   node has the same acceptance this is Seer's g* = argmin_g T(B, g) / E(g), budget g* * B.
   n = 0 (verification costs more than it returns, as at large batches on a CPU) means no
   speculation; a budget below the number of probes means none either (Seer).
With few running requests (the tail) drafts become top-k multi-path trees.
`AcceptanceStats` keeps the acceptance per draft position: `can_pay` bounds a step's gain
with it before any drafting work, and `best_draft_len` is Seer's class-level g* from it.
`FixedPolicy` gives every request the same draft length (the ablation).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

StepTime = Callable[[int, int], float]


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """`mode`: "off", "self" (each request drafts from its own output: SuffixDecoding) or
    "group" (from all siblings via the draft store: Seer). `budget`: "adaptive" (MBA) or
    "fixed" (`fixed_len` tokens for every request)."""

    mode: Literal["off", "self", "group"] = "group"
    budget: Literal["adaptive", "fixed"] = "adaptive"
    fixed_len: int = 4
    g_max: int = 8
    probe_weight: float = 2.0
    paths: int = 4
    multipath_max_batch: int = 4
    min_prob: float = 0.1
    max_match: int = 32
    tree_depth: int = 64
    sync_interval_s: float = 0.05
    store_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if self.mode not in ("off", "self", "group"):
            raise ValueError(f"speculation mode must be off, self or group, got {self.mode!r}")
        if self.budget not in ("adaptive", "fixed"):
            raise ValueError(f"speculation budget must be adaptive or fixed, got {self.budget!r}")
        for name in ("fixed_len", "g_max", "paths", "max_match", "tree_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"speculation {name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_prob <= 1:
            raise ValueError(f"speculation min_prob must be in [0, 1], got {self.min_prob}")
        if self.probe_weight <= 0 or self.sync_interval_s <= 0 or self.store_timeout_s <= 0:
            raise ValueError("probe_weight, sync_interval_s and store_timeout_s must be > 0")
        if self.max_match >= self.tree_depth:
            raise ValueError("max_match must be below tree_depth (drafts need depth left)")


class AcceptanceStats:
    """Online acceptance per draft position (1-based), Laplace-smoothed toward `prior`."""

    def __init__(self, g_max: int, prior: float = 0.5, prior_weight: float = 2.0) -> None:
        self.reached = [0] * (g_max + 1)
        self.accepted = [0] * (g_max + 1)
        self.prior = prior
        self.prior_weight = prior_weight

    def observe(self, draft_depth: int, accepted: int) -> None:
        """One verify step: a draft `draft_depth` deep of which `accepted` tokens held."""
        depth = min(draft_depth, len(self.reached) - 1)
        for j in range(1, min(accepted + 1, depth) + 1):
            self.reached[j] += 1
            self.accepted[j] += j <= accepted

    def alpha(self, j: int) -> float:
        j = min(j, len(self.reached) - 1)
        w = self.prior_weight
        return (self.accepted[j] + w * self.prior) / (self.reached[j] + w)

    def expected_tokens(self, g: int) -> float:
        """E(g): tokens per verify step with a g-token chain, bonus token included."""
        total, p = 1.0, 1.0
        for j in range(1, g + 1):
            p *= self.alpha(j)
            total += p
        return total


@dataclass(frozen=True, slots=True)
class Candidate:
    """A request's draft, best nodes first: `probs[i]` is node i's path probability."""

    request_id: str
    is_probe: bool
    probs: Sequence[float]


class Calibration:
    """Accepted draft tokens over what the trees predicted (sum of the drafted nodes' path
    probabilities), decayed so it follows the policy as it trains."""

    def __init__(self, decay: float = 0.995, prior: float = 2.0) -> None:
        self.decay = decay
        self.accepted = prior
        self.predicted = prior

    def observe(self, predicted: float, accepted: int) -> None:
        self.accepted = self.accepted * self.decay + accepted
        self.predicted = self.predicted * self.decay + predicted

    @property
    def factor(self) -> float:
        return self.accepted / self.predicted if self.predicted > 0 else 1.0


class MarginalBenefitPolicy:
    def __init__(self, config: SpecConfig, step_time: StepTime) -> None:
        self.config = config
        self.step_time = step_time
        self.stats = AcceptanceStats(config.g_max)
        self.calibration = Calibration()
        self._times: dict[int, list[float]] = {}
        self._pays: dict[int, tuple[bool, int]] = {}  # batch -> (can pay, when decided)
        self._num_observed = 0

    def step_times(self, batch: int) -> list[float]:
        """T(batch, g) for g = 0..g_max, made non-decreasing in g (a longer draft never
        costs less; the profile's noise can say otherwise). Cached per batch size."""
        times = self._times.get(batch)
        if times is None:
            times = list(
                itertools.accumulate(
                    (self.step_time(batch, g) for g in range(self.config.g_max + 1)), max
                )
            )
            self._times[batch] = times
        return times

    def can_pay(self, batch: int) -> bool:
        """Whether drafts could pay at all this step, before any drafting work: with every
        node accepted at twice the measured first-position rate (the nodes the policy picks
        beat the average), some budget must beat T(B, 0). False at large batches on a CPU,
        where a verify step costs about what its extra tokens do. Re-decided after every
        64 observed drafts (the acceptance moves slowly)."""
        cached = self._pays.get(batch)
        if cached is not None and self._num_observed - cached[1] < 64:
            return cached[0]
        pays = self._can_pay(batch)
        self._pays[batch] = (pays, self._num_observed)
        return pays

    def _can_pay(self, batch: int) -> bool:
        times = self.step_times(batch)
        q = min(1.0, 2.0 * self.stats.alpha(1))
        base = batch / times[0]
        return any(
            (batch + q * n) / _interp(times, n / batch) > base
            for n in range(1, batch * self.config.g_max + 1, max(1, batch // 4))
        )

    def best_draft_len(self, batch: int) -> int:
        """Seer's class-level g* = argmin over g of T(B, g) / E(g), with E(g) from the
        acceptance per position measured online."""
        times = self.step_times(batch)
        costs = [t / self.stats.expected_tokens(g) for g, t in enumerate(times)]
        return min(range(len(costs)), key=costs.__getitem__)

    def paths(self, batch: int) -> int:
        return self.config.paths if batch <= self.config.multipath_max_batch else 1

    def max_nodes(self, batch: int) -> int:
        """Nodes to ask each request's tree for before allocation."""
        return self.config.g_max

    def allocate(self, batch: int, candidates: Sequence[Candidate]) -> dict[str, int]:
        """Draft nodes per request (a prefix of each candidate's nodes).

        Nodes are taken in order of weighted gain (probes' first nodes before all, then
        the best remaining node of any request); the step's budget is the number n of them
        that maximises expected tokens per second, (B + c * sum of their probabilities) /
        T(B, n / B), with c the measured calibration of the trees' probabilities. With one
        acceptance rate for every node this is Seer's g* * B."""
        order = self._order(candidates)
        times = self.step_times(batch)
        c = self.calibration.factor
        best_n, best_rate, gained = 0, batch / times[0], 0.0
        for n, (_, p) in enumerate(order, start=1):
            gained += c * p
            rate = (batch + gained) / _interp(times, n / batch)
            if rate > best_rate:
                best_n, best_rate = n, rate
        probes = sum(1 for cand in candidates if cand.is_probe and cand.probs)
        if best_n == 0 or best_n < probes:  # Seer: no speculation below the probes' need
            return {}
        grant: dict[str, int] = {}
        for rid, _ in order[:best_n]:
            grant[rid] = grant.get(rid, 0) + 1
        return grant

    def observe(self, draft_depth: int, accepted: int, predicted: float = 0.0) -> None:
        self.stats.observe(draft_depth, accepted)
        self.calibration.observe(predicted, accepted)
        self._num_observed += 1

    def _order(self, candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
        """(request, node probability) in allocation order, at most g_max per request."""
        cap = self.config.g_max
        order: list[tuple[str, float]] = []
        taken = dict.fromkeys((cand.request_id for cand in candidates), 0)
        heap: list[tuple[float, int, str]] = []
        for cand in candidates:
            if cand.is_probe and cand.probs:
                order.append((cand.request_id, float(cand.probs[0])))
                taken[cand.request_id] = 1
        by_id = {cand.request_id: cand for cand in candidates}
        for i, cand in enumerate(candidates):
            n = taken[cand.request_id]
            if n < min(len(cand.probs), cap):
                heapq.heappush(heap, (-self._gain(cand, n), i, cand.request_id))
        while heap:
            _, i, rid = heapq.heappop(heap)
            cand, n = by_id[rid], taken[rid]
            order.append((rid, float(cand.probs[n])))
            taken[rid] = n = n + 1
            if n < min(len(cand.probs), cap):
                heapq.heappush(heap, (-self._gain(cand, n), i, rid))
        return order

    def _gain(self, c: Candidate, node: int) -> float:
        weight = self.config.probe_weight if c.is_probe else 1.0
        return weight * float(c.probs[node])


def _interp(values: Sequence[float], x: float) -> float:
    """Linear interpolation of values[0..n] at x (clamped to the last)."""
    if x >= len(values) - 1:
        return values[-1]
    lo = int(x)
    frac = x - lo
    return values[lo] * (1 - frac) + values[lo + 1] * frac


class FixedPolicy:
    """Every request gets up to `fixed_len` draft tokens (a chain), whatever the batch."""

    def __init__(self, config: SpecConfig) -> None:
        self.config = config

    def paths(self, batch: int) -> int:
        return 1

    def max_nodes(self, batch: int) -> int:
        return self.config.fixed_len

    def allocate(self, batch: int, candidates: Sequence[Candidate]) -> dict[str, int]:
        return {c.request_id: len(c.probs) for c in candidates if c.probs}

    def observe(self, draft_depth: int, accepted: int, predicted: float = 0.0) -> None:
        pass  # nothing adapts

    def can_pay(self, batch: int) -> bool:
        return True


SpecPolicy = MarginalBenefitPolicy | FixedPolicy


def make_policy(config: SpecConfig, step_time: StepTime) -> SpecPolicy:
    if config.budget == "fixed":
        return FixedPolicy(config)
    return MarginalBenefitPolicy(config, step_time)
