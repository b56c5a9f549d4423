"""How many draft tokens each running request gets in one verify step.

`MarginalBenefitPolicy` is Seer's Algorithm 1 (MBA) on measured numbers, with the
acceptance estimated per draft node instead of per class:
1. Each running request's suffix tree proposes up to g_max nodes with their path
   probabilities p; a `Calibration` learnt online from every verified node turns p into
   the chance a(p) that the node is really accepted.
2. Nodes are ranked: every probe's first node first (Seer: probes get one token before
   anyone), then by marginal gain, a(p) times lambda for probes (their early finish
   steers scheduling), at most g_max per request.
3. The budget is the number n of ranked nodes that maximises expected tokens per second,
   (B + sum a(p)) / T(B, n / B), with T the engine's profiled verify-step time. When every
   node has the same acceptance this is Seer's g* = argmin_g T(B, g) / E(g), budget g* * B.
   n = 0 (verification costs more than it returns, as at large batches on a CPU) means no
   speculation; a budget below the number of probes means none either (Seer).
   An engine that pads every row's verify tokens to the longest draft (``padded``: the
   built-in engine) pays T(B, d) for a step whose longest draft is d, however few rows
   draft that deep: there the budget is a depth d, every request drafting its calibrated
   nodes down to d, the d that maximises (B + sum a(p)) / T(B, d). Priced as an even
   spread instead, a few deep drafts in a wide batch looked cheap and cost the whole batch
   a deep verify step: grouped drafts slowed every configuration of the full validation
   workload (`seer sim validate`), live and simulated alike.
With few running requests (the tail) drafts become top-k multi-path trees.
4. Measured, not only profiled (``actors.drafts.measured``): the speculator reports every
   decode step's measured seconds (``observe_step``); ``MeasuredCost`` compares drafted
   steps' measured extra time over plain steps with the profile's, and T(B, g) above is
   the profile with its extra scaled by that factor (``step_times``). Where verification
   and drafting cost more than the profile says (a CPU: the extra rows of a verify step
   cost about what they return, and drafting from the trees takes the same cores), drafts
   are priced up and speculation turns down, then off; where drafted steps cost what the
   profile says, the factor stays near 1 and the budget is the profile's.
5. Exploration: after `explore_every` steps without a draft, the best `batch / 8` nodes
   (at least one) are drafted anyway. The estimates above only move when drafts are
   verified: without this, a few early misses (the first tiny rollout, a cold tree) could
   pin the calibration low and switch speculation off for good (measured on a policy after
   RL: one of two generators stayed at acceptance length 1.0). It costs a few nodes every
   16 steps; an exploration whose step measured slower than a plain one doubles the
   interval (up to 16x: every 256 steps), so where drafts do not pay exploring costs
   almost nothing; an exploration that measured faster, or a drafted grant that is not
   an exploration, sets it back.
6. Realized, not only predicted: every step the budget drafted (not the explorations)
   measures its realized speed-up, its tokens per row times a plain step's measured time
   over its own (``MeasuredCost.drafted``), kept per batch-size class (powers of two,
   ``losing``). Where the recent ones say drafts lose (a decayed mean below 1), the class
   is off: ``can_pay`` is False and the speculator does no drafting work at all (no tree
   lookups; its sync with the draft store slows), except that every exploration interval
   (backing off as explorations do) the budget's full grant is tried once as a probe,
   whose realized speed-up turns the class back on where drafts pay again. The budget's
   prediction (steps 3-4) can be wrong where both its inputs are noisy (a loaded CPU:
   measured live, the budget kept granting shallow drafts the live steps did not repay);
   what drafted steps realized is the check on it.
   A step that also prefills is not measured, so it is drafted only where drafted
   decode steps at its batch size realized a speed-up (``drafts_with_prefill``).
`can_pay` bounds a step's gain with the best calibrated bin before any drafting work.
`AcceptanceStats` keeps the acceptance per draft position; `best_draft_len` is Seer's
class-level g* from it.
`FixedPolicy` gives every request the same draft length (the ablation).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actors.drafts.measured import MeasuredCost
from actors.drafts.options import SpecConfig

StepTime = Callable[[int, int], float]
# a padded step prices its rows' shallower drafts at nothing, but the projections and MLP
# run on every real token (``actors.model.layout``): a node accepted less often than this
# is left out of a depth budget (measured on the built-in engine: 96 tokens more in a
# 16-row verify step of depth 8 at 384 tokens of context cost 4% of the step)
MIN_NODE_GAIN = 0.05
# exploration backs off to at most this many times `explore_every` steps
MAX_EXPLORE_BACKOFF = 16
# realized speed-ups of drafted steps: the decay of their running mean per batch-size class,
# and the (decayed) count below which a class is never judged losing
REALIZED_DECAY = 0.8
MIN_REALIZED_WEIGHT = 2.0
# what a drafted step must realize beyond 1 to count as paying: its clock does not see the
# draft sync's and the store's work, which on a host whose cores the engines share cost
# about a tenth of the throughput (measured: `seer bench drafts`, 128 prompts, CPU)
REALIZED_MARGIN = 0.1


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
    """How often a draft node the tree gave path probability p is really accepted, learnt
    online per probability bin from every verified node's outcome.

    The trees' probabilities are counts among the siblings so far, and how well they
    predict depends on the policy: on a policy after 80 RL iterations nodes at p = 0.2 and
    at p = 0.8 were both accepted about 60% of the time (measured), while a cold policy's
    siblings disagree and its trees are optimistic. So a bin's estimate shrinks toward the
    acceptance of all verified nodes (a bin nobody drafted yet borrows it, is drafted, and
    learns its own), and that pooled rate starts pessimistic (`prior_rate` over
    `prior_weight` nodes): drafts that do not pay slow every running request, so a fresh
    generator speculates only as verified drafts (exploration included) show the trees can
    be trusted. Everything decays so it follows the policy as it trains."""

    def __init__(
        self,
        bins: int = 10,
        decay: float = 0.9995,
        prior_weight: float = 8.0,
        prior_rate: float = 0.1,
    ) -> None:
        self.bins = bins
        self.decay = decay
        self.prior_weight = prior_weight
        self.prior_rate = prior_rate
        self.nodes = [0.0] * bins
        self.accepted = [0.0] * bins
        self._estimates: list[float] | None = None  # per bin, until the next observation

    def _bin(self, p: float) -> int:
        return min(max(int(p * self.bins), 0), self.bins - 1)

    @property
    def pooled(self) -> float:
        """The acceptance of all verified nodes, with the prior."""
        w = self.prior_weight
        return (sum(self.accepted) + w * self.prior_rate) / (sum(self.nodes) + w)

    def estimate(self, p: float) -> float:
        """The chance a node of path probability `p` is accepted: a lower confidence bound
        (one standard error below the mean), so a bin drafts on evidence, not on the luck
        of its first few nodes (exploration supplies the evidence)."""
        return self._table()[self._bin(p)]

    def estimate_all(self, probs: Sequence[float]) -> list[float]:
        """``estimate`` of each probability, the bins' table read once (a decision reads
        up to g_max nodes of every running request, every engine step)."""
        table = self._table()
        return [table[self._bin(float(p))] for p in probs]

    def best(self) -> float:
        """The estimate of the most often accepted bin."""
        return max(self._table())

    def _table(self) -> list[float]:
        """Every bin's estimate, computed once per observed draft (a decision reads it for
        up to g_max nodes of every running request)."""
        if self._estimates is None:
            w, pooled = self.prior_weight, self.pooled
            self._estimates = []
            for nodes, accepted in zip(self.nodes, self.accepted, strict=True):
                n = nodes + w
                mean = (accepted + w * pooled) / n
                self._estimates.append(max(0.0, mean - math.sqrt(mean * (1.0 - mean) / n)))
        return self._estimates

    def observe(self, probs: Sequence[float], accepted: Sequence[bool]) -> None:
        """One verified draft: each node's path probability and whether it was accepted."""
        d = self.decay
        self.nodes = [n * d for n in self.nodes]
        self.accepted = [a * d for a in self.accepted]
        for p, ok in zip(probs, accepted, strict=True):
            b = self._bin(p)
            self.nodes[b] += 1.0
            self.accepted[b] += ok
        self._estimates = None


class MarginalBenefitPolicy:
    def __init__(self, config: SpecConfig, step_time: StepTime, *, padded: bool = False) -> None:
        self.config = config
        self.step_time = step_time
        self.padded = padded  # the engine prices a step at its longest draft
        self.stats = AcceptanceStats(config.g_max)
        self.calibration = Calibration()
        self.measured = MeasuredCost()
        self._times: dict[int, list[float]] = {}
        # batch -> (can pay, observed drafts and measured drafted steps when decided)
        self._pays: dict[int, tuple[bool, int, int]] = {}
        self._num_observed = 0
        self._steps = 0  # can_pay calls: one per engine step
        self._last_grant = 0  # the step of the last draft granted
        self.explore_interval = config.explore_every  # backs off while explorations lose
        # the last grant: B, T(B, d), its kind ("grant", "explore" or "probe", see ``losing``)
        self._pending: tuple[int, float, str] | None = None
        # batch-size class -> [decayed sum of drafted steps' realized speed-ups, weight]
        self._realized: dict[int, list[float]] = {}
        # whether the last ``can_pay`` found drafts worth it at its batch size (not only an
        # exploration or a probe being due)
        self.is_on = True

    def profiled_times(self, batch: int) -> list[float]:
        """The profile's T(batch, g) for g = 0..g_max, made non-decreasing in g (a longer
        draft never costs less; the profile's noise can say otherwise). Cached per batch."""
        times = self._times.get(batch)
        if times is None:
            times = list(
                itertools.accumulate(
                    (self.step_time(batch, g) for g in range(self.config.g_max + 1)), max
                )
            )
            self._times[batch] = times
        return times

    def step_times(self, batch: int) -> list[float]:
        """T(batch, g) as the budget prices it: the profile's, its extra for drafts scaled
        by what drafted steps measured (``MeasuredCost.price``)."""
        return self.measured.price(self.profiled_times(batch))

    def can_pay(self, batch: int) -> bool:
        """Whether drafts could pay at all this step, before any drafting work (the
        speculator asks once per engine step): with every node accepted as often as the
        best probability bin's nodes are, some budget must beat T(B, 0). False at large
        batches on a CPU while the trees are unreliable (a cold policy), where a verify step
        costs about what its extra tokens return. Re-decided after every 64 observed
        drafts; True anyway when an exploration is due. False where drafted steps at this
        batch size realized less than plain ones lately (``losing``) but for a probe every
        exploration interval."""
        self._steps += 1
        self.is_on = self._is_on(batch)
        return self.is_on or self._explore_due()

    def _is_on(self, batch: int) -> bool:
        if self.losing(batch):
            return False
        cached = self._pays.get(batch)
        num_drafted = self.measured.num_drafted
        if cached is None or self._num_observed - cached[1] >= 64 or num_drafted - cached[2] >= 8:
            cached = self._pays[batch] = (self._can_pay(batch), self._num_observed, num_drafted)
        return cached[0]

    def losing(self, batch: int) -> bool:
        """Whether the budget's drafted steps at about this batch size (its power-of-two
        class) realized too little lately: a decayed mean speed-up below 1 +
        ``REALIZED_MARGIN``."""
        realized = self._realized.get(batch.bit_length())
        return (
            realized is not None
            and realized[1] >= MIN_REALIZED_WEIGHT
            and realized[0] < realized[1] * (1.0 + REALIZED_MARGIN)
        )

    @property
    def granted(self) -> bool:
        """Whether the last ``allocate`` drafted the budget's own grant (not an exploration
        or a probe in a class that is off)."""
        return self._pending is not None and self._pending[2] == "grant"

    def drafts_with_prefill(self, batch: int) -> bool:
        """Whether to draft in a step that also prefills: only where the budget's drafted
        decode steps at about this batch size realized a speed-up lately (as ``losing``
        judges, the other way round). A step that prefills is not measured (its time is not
        the decode's), so the budget could never learn what drafts in it cost: measured
        live on the CPU (`seer bench drafts`, 128 prompts), drafted steps that also
        prefilled took twice the time of those that did not draft, and nothing turned them
        off."""
        realized = self._realized.get(batch.bit_length())
        return (
            realized is not None
            and realized[1] >= MIN_REALIZED_WEIGHT
            and realized[0] > realized[1] * (1.0 + REALIZED_MARGIN)
        )

    def realized_speedup(self, batch: int) -> float | None:
        """The decayed mean realized speed-up of drafted steps in ``batch``'s class."""
        realized = self._realized.get(batch.bit_length())
        return realized[0] / realized[1] if realized and realized[1] else None

    def _explore_due(self) -> bool:
        return self._steps - self._last_grant >= self.explore_interval

    def _can_pay(self, batch: int) -> bool:
        times = self.step_times(batch)
        q = min(1.0, self.calibration.best())
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
        that maximises expected tokens per second, (B + sum of their calibrated acceptance)
        / T(B, n / B). With one acceptance rate for every node this is Seer's g* * B."""
        probe = self.losing(batch)  # off here: only a probe of the full budget when due
        if probe and not self._explore_due():
            self._pending = None
            return {}
        if self.padded:
            return self._allocate_padded(batch, candidates, probe)
        order = self._order(candidates)
        times = self.step_times(batch)
        best_n, best_rate, gained = 0, batch / times[0], 0.0
        estimates = self.calibration.estimate_all([p for _, p in order])
        for n, est in enumerate(estimates, start=1):
            gained += est
            rate = (batch + gained) / _interp(times, n / batch)
            if rate > best_rate:
                best_n, best_rate = n, rate
        probes = sum(1 for cand in candidates if cand.is_probe and cand.probs)
        explore = False
        if best_n == 0 or best_n < probes:  # Seer: no speculation below the probes' need
            if not order or not self._explore_due():
                self._pending = None
                return {}
            best_n, explore = max(1, batch // 8), True  # explore: keep the estimates measured
        taken = order[:best_n]
        profiled = _interp(self.profiled_times(batch), len(taken) / batch)
        return self._grant(taken, batch, profiled, _kind(explore, probe))

    def _grant(
        self, nodes: Sequence[tuple[str, float]], batch: int, profiled: float, kind: str
    ) -> dict[str, int]:
        """Draft nodes per request for ``nodes`` in allocation order."""
        grant: dict[str, int] = {}
        for rid, _ in nodes:
            grant[rid] = grant.get(rid, 0) + 1
        return self._granted(grant, batch, profiled, kind)

    def _granted(
        self, grant: dict[str, int], batch: int, profiled: float, kind: str
    ) -> dict[str, int]:
        """Record that this step drafts (exploration is due ``explore_interval`` steps
        after), and the profile's time for it (``observe_step`` measures it). ``kind``:
        "grant" (the budget's), "explore" or "probe" (the budget's, in a losing class)."""
        self._last_grant = self._steps
        self._pending = (batch, profiled, kind)
        if kind == "grant":
            self.explore_interval = self.config.explore_every
        return grant

    def _allocate_padded(
        self, batch: int, candidates: Sequence[Candidate], probe: bool = False
    ) -> dict[str, int]:
        """``allocate`` for an engine that pads every row to the longest draft: the depth d
        (nodes per row) that maximises (B + calibrated acceptance of every request's nodes
        down to d) / T(B, d); each request drafts its nodes down to d, less the trailing
        ones not worth a node (calibrated acceptance below ``MIN_NODE_GAIN``)."""
        times = self.step_times(batch)
        cap = self.config.g_max
        estimates = [
            (cand.request_id, self.calibration.estimate_all(cand.probs[:cap]))
            for cand in candidates
            if cand.probs
        ]
        best_d, best_rate, gained = 0, batch / times[0], 0.0
        for d in range(1, cap + 1):
            gained += sum(est[d - 1] for _, est in estimates if len(est) >= d)
            rate = (batch + gained) / times[d]
            if rate > best_rate:
                best_d, best_rate = d, rate
        grant: dict[str, int] = {}
        for rid, est in estimates if best_d else ():
            n = min(best_d, len(est))
            while n and est[n - 1] < MIN_NODE_GAIN:
                n -= 1
            if n:
                grant[rid] = n
        profiled = self.profiled_times(batch)
        if not grant:
            if not estimates or not self._explore_due():
                self._pending = None
                return {}
            order = self._order(candidates)[: max(1, batch // 8)]  # explore
            depth = max(sum(1 for r, _ in order if r == rid) for rid, _ in order)
            return self._grant(order, batch, profiled[depth], "explore")
        return self._granted(grant, batch, profiled[max(grant.values())], _kind(False, probe))

    def observe_step(
        self,
        batch: int,
        num_tokens: float,
        seconds: float,
        *,
        draft_len: float | None = None,
        plain_seconds: float | None = None,
    ) -> None:
        """One decode step as measured: ``batch`` decoding rows produced ``num_tokens``
        tokens (bonus tokens included) in ``seconds`` (the speculator's drafting work
        included). A step drafted by the last grant measures what drafts cost against the
        profile's T(B, d); a step without drafts measures the machine against T(B, 0). An
        exploration that measured slower than a plain step doubles the exploration
        interval (up to ``MAX_EXPLORE_BACKOFF`` times ``explore_every``); one that measured
        faster sets it back to ``explore_every``. A step the budget drafted (not an
        exploration) adds its realized speed-up to its batch-size class (``losing``); a
        probe's is judged like an exploration's as well.

        ``draft_len``: the step's draft length as this policy prices it (its depth on a
        padded engine, else nodes per row), for a caller that reuses grants (the
        simulator) instead of the last grant; ``plain_seconds``: what the step would have
        taken without drafts, where the caller knows it (the simulator's cost model)."""
        pending, self._pending = self._pending, None
        if batch <= 0 or seconds <= 0:
            return
        profiled_times = self.profiled_times(batch)
        profiled = profiled_times[0]
        if draft_len is not None:
            pending = (batch, _interp(profiled_times, draft_len), "grant") if draft_len else None
        if pending is None or pending[0] != batch:
            self.measured.plain(seconds, profiled)
            return
        _, profiled_drafted, kind = pending
        speedup = self.measured.drafted(
            num_tokens / batch, seconds, profiled, profiled_drafted, plain_seconds
        )
        if kind != "explore":
            realized = self._realized.setdefault(batch.bit_length(), [0.0, 0.0])
            realized[0] = realized[0] * REALIZED_DECAY + speedup
            realized[1] = realized[1] * REALIZED_DECAY + 1.0
        if kind == "grant":
            return
        if speedup < 1.0:
            cap = self.config.explore_every * MAX_EXPLORE_BACKOFF
            self.explore_interval = min(2 * self.explore_interval, cap)
        else:  # drafts paid where they were not expected to: measure again soon
            self.explore_interval = self.config.explore_every

    def observe(
        self, draft_depth: int, accepted: int, probs: Sequence[float], node_ok: Sequence[bool]
    ) -> None:
        """One verified draft: its depth, the tokens accepted, and per node its path
        probability and whether it was accepted."""
        self.stats.observe(draft_depth, accepted)
        self.calibration.observe(probs, node_ok)
        self._num_observed += 1

    def _order(self, candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
        """(request, node probability) in allocation order, at most g_max per request."""
        cap = self.config.g_max
        order: list[tuple[str, float]] = []
        taken = dict.fromkeys((cand.request_id for cand in candidates), 0)
        heap: list[tuple[float, float, int, str]] = []  # ties go to the tree's likelier node
        for cand in candidates:
            if cand.is_probe and cand.probs:
                order.append((cand.request_id, float(cand.probs[0])))
                taken[cand.request_id] = 1
        gains: dict[str, list[float]] = {}  # each node's weighted gain
        for cand in candidates:
            weight = self.config.probe_weight if cand.is_probe else 1.0
            gains[cand.request_id] = [
                weight * e for e in self.calibration.estimate_all(cand.probs[:cap])
            ]
        by_id = {cand.request_id: cand for cand in candidates}
        for i, cand in enumerate(candidates):
            n = taken[cand.request_id]
            if n < min(len(cand.probs), cap):
                g = gains[cand.request_id][n]
                heapq.heappush(heap, (-g, -cand.probs[n], i, cand.request_id))
        while heap:
            _, _, i, rid = heapq.heappop(heap)
            cand, n = by_id[rid], taken[rid]
            order.append((rid, float(cand.probs[n])))
            taken[rid] = n = n + 1
            if n < min(len(cand.probs), cap):
                heapq.heappush(heap, (-gains[rid][n], -cand.probs[n], i, rid))
        return order


def _kind(explore: bool, probe: bool) -> str:
    """A grant's kind for ``observe_step``."""
    return "explore" if explore else "probe" if probe else "grant"


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

    def observe(
        self, draft_depth: int, accepted: int, probs: Sequence[float], node_ok: Sequence[bool]
    ) -> None:
        pass  # nothing adapts

    granted = True  # every grant is the budget's own

    def can_pay(self, batch: int) -> bool:
        return True

    def drafts_with_prefill(self, batch: int) -> bool:
        return True

    def observe_step(
        self,
        batch: int,
        num_tokens: float,
        seconds: float,
        *,
        draft_len: float | None = None,
        plain_seconds: float | None = None,
    ) -> None:
        pass  # nothing adapts


SpecPolicy = MarginalBenefitPolicy | FixedPolicy


def make_draft_policy(
    config: SpecConfig, step_time: StepTime, *, padded: bool = False
) -> SpecPolicy:
    """``padded``: the engine prices a verify step at its longest draft (the built-in
    engine); the adaptive budget is then a depth (``MarginalBenefitPolicy``)."""
    if config.budget == "fixed":
        return FixedPolicy(config)
    return MarginalBenefitPolicy(config, step_time, padded=padded)
