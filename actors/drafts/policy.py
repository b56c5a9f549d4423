"""How many draft tokens each running request gets in one verify step.

`MarginalBenefitPolicy` is Seer's Algorithm 1 (MBA) on measured numbers:
1. Acceptance per draft position is measured online (`AcceptanceStats`: the chance that
   position j is accepted given positions < j were). With it, a draft of g tokens yields
   E(g) = 1 + sum_{j<=g} prod_{i<=j} alpha_i tokens per step.
2. The engine's profiled step time T(B, g) gives the time per token T(B, g) / E(g); the
   draft length g* in 0..g_max that minimises it sets the step's budget g* * B draft nodes.
   g* = 0 (verification costs more than it returns) means no speculation this step.
3. If the budget cannot give every probe a token, nothing is drafted; else probes get one
   token each first, then tokens go one by one to whichever request gains the most
   expected accepted tokens per token: the node's path probability from its suffix tree,
   times lambda for probes (their early finish steers scheduling), at most g_max each.
With few running requests (the tail) drafts become top-k multi-path trees.
`FixedPolicy` gives every request the same draft length (the ablation).
"""

from __future__ import annotations

import heapq
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
    sync_interval_s: float = 0.02
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


class MarginalBenefitPolicy:
    def __init__(self, config: SpecConfig, step_time: StepTime) -> None:
        self.config = config
        self.step_time = step_time
        self.stats = AcceptanceStats(config.g_max)

    def best_draft_len(self, batch: int) -> int:
        """g* = argmin over g in 0..g_max of T(B, g) / E(g)."""
        costs = [
            self.step_time(batch, g) / self.stats.expected_tokens(g)
            for g in range(self.config.g_max + 1)
        ]
        return min(range(len(costs)), key=costs.__getitem__)

    def paths(self, batch: int) -> int:
        return self.config.paths if batch <= self.config.multipath_max_batch else 1

    def max_nodes(self, batch: int) -> int:
        """Nodes to ask each request's tree for before allocation."""
        return self.config.g_max

    def allocate(self, batch: int, candidates: Sequence[Candidate]) -> dict[str, int]:
        """Draft nodes per request (a prefix of each candidate's nodes)."""
        budget = self.best_draft_len(batch) * batch
        probes = [c for c in candidates if c.is_probe and c.probs]
        if budget <= 0 or budget < len(probes):
            return {}
        grant = dict.fromkeys((c.request_id for c in candidates), 0)
        for c in probes:
            grant[c.request_id] = 1
        budget -= len(probes)
        cap = self.config.g_max
        heap: list[tuple[float, int, str]] = []
        by_id = {c.request_id: c for c in candidates}
        for i, c in enumerate(candidates):
            n = grant[c.request_id]
            if n < min(len(c.probs), cap):
                heapq.heappush(heap, (-self._gain(c, n), i, c.request_id))
        while budget > 0 and heap:
            _, i, rid = heapq.heappop(heap)
            grant[rid] += 1
            budget -= 1
            c, n = by_id[rid], grant[rid]
            if n < min(len(c.probs), cap):
                heapq.heappush(heap, (-self._gain(c, n), i, rid))
        return {rid: n for rid, n in grant.items() if n}

    def observe(self, draft_depth: int, accepted: int) -> None:
        self.stats.observe(draft_depth, accepted)

    def _gain(self, c: Candidate, node: int) -> float:
        weight = self.config.probe_weight if c.is_probe else 1.0
        return weight * float(c.probs[node])


class FixedPolicy:
    """Every request gets up to `fixed_len` draft tokens (a chain), whatever the batch."""

    def __init__(self, config: SpecConfig) -> None:
        self.config = config
        self.stats = AcceptanceStats(max(config.fixed_len, config.g_max))

    def paths(self, batch: int) -> int:
        return 1

    def max_nodes(self, batch: int) -> int:
        return self.config.fixed_len

    def allocate(self, batch: int, candidates: Sequence[Candidate]) -> dict[str, int]:
        return {c.request_id: len(c.probs) for c in candidates if c.probs}

    def observe(self, draft_depth: int, accepted: int) -> None:
        self.stats.observe(draft_depth, accepted)


SpecPolicy = MarginalBenefitPolicy | FixedPolicy


def make_policy(config: SpecConfig, step_time: StepTime) -> SpecPolicy:
    if config.budget == "fixed":
        return FixedPolicy(config)
    return MarginalBenefitPolicy(config, step_time)
