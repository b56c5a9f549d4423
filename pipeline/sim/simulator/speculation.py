"""The speculation side of a simulated rollout (``SimConfig.spec="group"``).

Each instance has the generator's speculation policy (``make_draft_policy``: MBA), which
decides every running request's draft length from T(B, g) and per-request candidates.
Two ways to draw what a draft holds:

- on the acceptance table (``AcceptanceTable``: real suffix trees over model text, by how
  many siblings are ahead, so it changes as siblings finish): the grant sets each row's
  expected token rate for a stretch of steps (``Speculation.set_drafts``);
- on recorded output (``SimRequest.token_ids``, a live trace's): each instance runs the
  live generator's ``Speculator`` over real suffix trees of the siblings' recorded tokens
  as far as the simulation has generated them, and every draft is verified against the
  request's recorded continuation, one step at a time (``Speculation.replay_drafts``,
  ``pipeline.sim.replay``).

Either way the policy is told what each step cost (``observe_step``), as the live
speculator tells it the clock's seconds: here the cost model's seconds for the stretch's
step with its drafts and without them, so the budget prices drafts by measured cost in
both (``actors.drafts.measured``).
"""

from __future__ import annotations

import copy
import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from actors.drafts.options import SpecConfig
from actors.drafts.policy import Candidate, SpecPolicy, StepTime, make_draft_policy
from actors.generator.builtin.profile import StepProfile
from actors.generator.engine import StepDelta, StepResult
from actors.generator.speculator import Speculator
from pipeline.sim.acceptance import AcceptanceTable, measure_acceptance
from pipeline.sim.costmodel import CostModel
from pipeline.sim.instance import SimInstance
from pipeline.sim.replay import ReplayClient, ReplayTrees, accepted_len
from pipeline.sim.simulator.config import SimConfig
from pipeline.sim.simulator.record import Book

__all__ = ["Speculation", "recorded_step_times"]

_REGRANT = 256  # verified drafts after which cached grants are recomputed
_OBSERVE = 4  # drafts verified per stretch for the speculation policy's calibration
_WARM = 600  # verified drafts a speculation policy has seen before the run

_Class = tuple[int, bool]  # a request's kind: its acceptance row and whether it is a probe


def recorded_step_times(rows: Sequence[tuple[int, int, float]]) -> StepTime:
    """T(B, g) from recorded (B, g, seconds) rows, every B from 1 and g from 0 up to the
    largest: a live generator's, so that a replayed policy prices drafts as the live one
    did. Read through the built-in engine's own ``StepProfile`` (exact on the recorded
    points; a batch above the largest scales it linearly; g clamped)."""
    if not rows:
        raise ValueError("recorded step times: no rows")
    times = {(int(b), int(g)): float(t) for b, g, t in rows}
    batches = range(1, max(b for b, _ in times) + 1)
    lens = range(max(g for _, g in times) + 1)
    missing = [(b, g) for b in batches for g in lens if (b, g) not in times]
    if missing:
        raise ValueError(f"recorded step times: no row for (B, g) = {missing[0]}")
    table = np.array([[times[(b, g)] for g in lens] for b in batches])
    return StepProfile(list(batches), list(lens), table).seconds


class Speculation:
    """Every instance's speculation policy and, on recorded output, its live
    ``Speculator``; sets each running chunk's draft length and token rate when the
    instance plans a stretch (``SimInstance.on_batch``)."""

    def __init__(
        self,
        book: Book,
        config: SimConfig,
        cost: CostModel,
        acceptance: AcceptanceTable | None,
        instances: Sequence[SimInstance],
        spec_state: Sequence[SpecPolicy] | None,
    ) -> None:
        self.book = book
        self.cost = cost
        self.acceptance: AcceptanceTable | None = acceptance
        self.rng = random.Random(config.seed)
        self.policies: list[SpecPolicy] = []
        self.speculators: list[Speculator] = []
        self.started: set[int] = set()  # requests whose running chunk a speculator tracks
        # recorded output: grouped drafts replay on it, step by step (``replay``)
        recorded = [r for r in book.reqs if r.token_ids]
        self.replay = config.spec == "group" and bool(recorded)
        if recorded and (
            len(recorded) < len(book.reqs) or any(len(r.token_ids) < r.output_len for r in recorded)
        ):
            raise ValueError("recorded tokens must cover every request's whole output")
        if config.spec == "group":
            self._start(config, instances, spec_state)
        self._grants: list[dict[Any, dict[_Class, int]]] = [{} for _ in instances]
        self._observed = [0] * len(instances)

    # --- set-up ----------------------------------------------------------------------------
    def _start(
        self,
        config: SimConfig,
        instances: Sequence[SimInstance],
        spec_state: Sequence[SpecPolicy] | None,
    ) -> None:
        if not self.replay:
            self.acceptance = self.acceptance or measure_acceptance(g_max=config.g_max)
        spec_cfg = SpecConfig(mode="group", g_max=config.g_max)
        times = self._step_times(config, len(instances))
        padded = self.cost.pads_drafts  # as the live policy on the engine this table prices
        if self.replay:
            self._start_speculators(spec_cfg, times, padded)
        else:
            self.policies = [make_draft_policy(spec_cfg, t, padded=padded) for t in times]
        for inst in instances:
            inst.on_batch = self.replay_drafts if self.replay else self.set_drafts
        if spec_state is not None:  # continue from an earlier rollout's policies
            self._carry_on(spec_state, len(instances))
        elif self.acceptance is not None and not self.replay:  # warm: earlier iterations
            for policy in self.policies:
                self._warm(policy, self.acceptance)
        elif self.replay:  # the steps a fresh live policy counted before this rollout
            for policy, batches in zip(self.policies, config.spec_prelude, strict=False):
                for batch in batches:
                    policy.can_pay(batch)

    def _step_times(self, config: SimConfig, num_instances: int) -> list[StepTime]:
        """The T(B, g) each instance's policy prices drafts by: the recorded ones, else the
        table's at the workload's mean context."""
        if config.spec_step_times:
            return [recorded_step_times(rows) for rows in config.spec_step_times]
        reqs = self.book.reqs
        mean_ctx = sum(r.prompt_len + r.output_len / 2 for r in reqs) / len(reqs)
        cost = self.cost

        def step_time(b: int, g: float) -> float:
            return cost.decode_s(b, mean_ctx, g)

        return [step_time] * num_instances

    def _start_speculators(self, spec_cfg: SpecConfig, times: list[StepTime], padded: bool) -> None:
        book = self.book
        self._trees = ReplayTrees(
            [r.token_ids for r in book.reqs],
            book.members,
            book.generated,
            spec_cfg,
            [r.prompt_tail for r in book.reqs],
        )
        for priced in times:
            replay = ReplayClient(self._trees, book.index)
            speculator = Speculator(spec_cfg, priced, padded=padded, source=replay)
            self.speculators.append(speculator)
            self.policies.append(speculator.policy)

    def _carry_on(self, spec_state: Sequence[SpecPolicy], num_instances: int) -> None:
        if len(spec_state) != num_instances:
            raise ValueError(
                f"spec_state has {len(spec_state)} policies for {num_instances} instances"
            )
        self.policies = [copy.deepcopy(p) for p in spec_state]
        for speculator, policy in zip(self.speculators, self.policies, strict=False):
            speculator.policy = policy

    def _warm(self, policy: SpecPolicy, table: AcceptanceTable) -> None:
        """A generator's speculation policy is warm after earlier iterations: its calibration
        has seen ``_WARM`` verified drafts (every reference count alike) before the run."""
        for i in range(_WARM):
            row = i % len(table.refs)
            self._verify(policy, table, row, table.g_max)

    def _verify(self, policy: SpecPolicy, table: AcceptanceTable, row: int, g: int) -> None:
        """One verify step of a g-token draft, its outcome drawn from the table."""
        ok = 0
        while ok < g and self.rng.random() * table.accept[row][ok] < table.accept[row][ok + 1]:
            ok += 1
        policy.observe(g, ok, table.probs[row][1 : g + 1], [j < ok for j in range(g)])

    # --- on the acceptance table -------------------------------------------------------------
    def _refs(self, r: int) -> int:
        """How many of request ``r``'s siblings are ahead of it."""
        progress = self.book.progress
        mine = progress[r]
        siblings = self.book.members[self.book.reqs[r].group_id]
        return sum(1 for s in siblings if s != r and progress[s] > mine)

    def set_drafts(self, inst: SimInstance) -> None:
        """Each running chunk's draft length (the MBA policy's grant) and token rate.

        Requests whose trees are alike (the same reference count, probe or not) offer the
        policy the same candidates, so the policy's grant per kind of request (the median
        over its members) is reused for batches of about the same size (within 25%) whose
        kinds it has seen, until the policy has seen ``_REGRANT`` more verified drafts; a
        few drafts per stretch (``_OBSERVE``) are verified for its calibration."""
        table = self.acceptance
        assert table is not None
        batch = len(inst.running)
        rows = [table.row(self._refs(c.request)) for c in inst.running]
        classes = [
            (row, self.book.reqs[c.request].is_probe)
            for row, c in zip(rows, inst.running, strict=True)
        ]
        key = int(math.log(batch) / math.log(1.25))
        per_class = self._granted(inst, table, key, classes)
        for c, cls in zip(inst.running, classes, strict=True):
            g = per_class[cls]
            c.draft = g
            c.rate = table.expected_tokens(table.refs[cls[0]], g) if g else 1.0
        if self._drafts_lose(inst):
            # a grant that does not pay is the policy exploring (or misjudging): live,
            # it holds for one step, then the policy decides again
            inst.one_step = True
            self._grants[inst.index].pop(key, None)
        self._observe(inst, table, classes)
        seconds, plain, depth = self._step_cost(inst.running)
        self.policies[inst.index].observe_step(
            batch, sum(c.rate for c in inst.running), seconds, draft_len=depth, plain_seconds=plain
        )

    def _step_cost(self, rows: Sequence[Any]) -> tuple[float, float, float]:
        """One decode step of ``rows`` (running chunks): its seconds with their drafts and
        without, and the draft length it is priced at (``CostModel.batch_draft``)."""
        cost = self.cost
        ctx = cost.batch_context([c.ctx for c in rows])
        g = cost.batch_draft([c.draft for c in rows])
        plain = cost.decode_s(len(rows), ctx, 0)
        return (cost.decode_s(len(rows), ctx, g) if g else plain), plain, g

    def _granted(
        self, inst: SimInstance, table: AcceptanceTable, key: int, classes: list[_Class]
    ) -> dict[_Class, int]:
        """The policy's grant per kind of request for batches of about this size (``key``):
        the cached one while it covers ``classes``, else asked of the policy."""
        policy = self.policies[inst.index]
        batch = len(classes)
        cache = self._grants[inst.index]
        if self._observed[inst.index] >= _REGRANT:
            cache.clear()
            self._observed[inst.index] = 0
        per_class = cache.get(key)
        if per_class is None or not per_class.keys() >= set(classes):
            grant: dict[str, int] = {}
            if policy.can_pay(batch):
                cands = [
                    Candidate(str(i), probe, table.probs[row][1 : table.g_max + 1])
                    for i, (row, probe) in enumerate(classes)
                ]
                grant = policy.allocate(batch, cands)
            members: dict[_Class, list[int]] = {}
            for i, cls in enumerate(classes):
                members.setdefault(cls, []).append(grant.get(str(i), 0))
            fresh = {cls: int(statistics.median_low(gs)) for cls, gs in members.items()}
            per_class = cache[key] = {**(per_class or {}), **fresh}
        return per_class

    def _drafts_lose(self, inst: SimInstance) -> bool:
        """Whether the running chunks' drafts make the batch's tokens come no faster than
        none would (false when there are none)."""
        drafts = sum(c.draft for c in inst.running)
        if not drafts:
            return False
        batch = len(inst.running)
        ctx = self.cost.batch_context([c.ctx for c in inst.running])
        gained = sum(c.rate - 1.0 for c in inst.running)
        with_drafts = (batch + gained) / self.cost.decode_s(batch, ctx, drafts / batch)
        return with_drafts <= batch / self.cost.decode_s(batch, ctx, 0)

    def _observe(self, inst: SimInstance, table: AcceptanceTable, classes: list[_Class]) -> None:
        """One verify step of the first few drafts, for the policy's calibration."""
        policy = self.policies[inst.index]
        observed = 0
        for c, cls in zip(inst.running, classes, strict=True):
            g = c.draft
            if g and observed < _OBSERVE:  # one verify step of it, for the calibration
                observed += 1
                row = cls[0]
                ok = 0
                while (
                    ok < g and self.rng.random() * table.accept[row][ok] < table.accept[row][ok + 1]
                ):
                    ok += 1
                probs = table.probs[row][1 : g + 1]
                policy.observe(g, ok, probs, [j < ok for j in range(g)])
        self._observed[inst.index] += observed

    # --- on recorded output ------------------------------------------------------------------
    def replay_drafts(self, inst: SimInstance) -> None:
        """One engine step's speculation on recorded output: the instance's live
        ``Speculator`` drafts for the decoding rows and its policy grants; each granted draft
        is verified against the row's recorded continuation, and the step's tokens (accepted
        path and bonus token) set the row's rate for a stretch of one step."""
        spec = self.speculators[inst.index]
        decoding = [c for c in inst.running if c.sampled and not c.pending_prefill]
        for c in inst.running:
            c.draft, c.rate = 0, 1.0
            if c.request not in self.started:
                self._track(spec, c.request, c.chunk_seq)
        if not decoding:
            return
        self._trees.begin_step()
        reqs = self.book.reqs
        ids = [reqs[c.request].request_id for c in decoding]
        drafts = spec.drafts(ids)
        deltas = []
        for c, rid in zip(decoding, ids, strict=True):
            pos = self.book.generated(c.request)
            tokens = reqs[c.request].token_ids
            draft = drafts.get(rid)
            left = max(1, round(c.target - c.done))
            ok = accepted_len(draft, tokens[pos : pos + left - 1]) if draft else 0
            if draft:
                c.draft = len(draft.token_ids)
            c.rate = float(1 + ok)
            made = tuple(tokens[pos : pos + 1 + ok])
            deltas.append(StepDelta(rid, made, (), c.draft, ok))
        seconds, plain, _ = self._step_cost(decoding)
        spec.observe(StepResult(deltas=tuple(deltas), finished=()), ids, seconds, plain)
        inst.one_step = True

    def _track(self, spec: Speculator, r: int, chunk_seq: int) -> None:
        """Start tracking request ``r``'s running chunk in its instance's speculator."""
        self.started.add(r)
        req = self.book.reqs[r]
        spec.start(
            req.request_id,
            req.group_id,
            chunk_seq,
            req.prompt_tail,
            req.token_ids[: self.book.generated(r)],
            req.is_probe,
        )

    def on_chunk_ended(self, instance: int, r: int) -> None:
        """Request ``r``'s chunk ended on ``instance``: its speculator stops tracking it."""
        if r in self.started:
            self.started.discard(r)
            self.speculators[instance].end(self.book.reqs[r].request_id)
