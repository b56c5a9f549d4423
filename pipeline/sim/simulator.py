"""Simulator: a rollout on N simulated generator instances, driven by the live policy objects.

Consumes a workload (``SimRequest``: true output lengths, which only the simulated engine
and the oracle see), a ``SimConfig`` and a ``CostModel``. Runs, unmodified, the objects the
live scheduler actor runs: ``SchedulerCore`` with its policy from ``make_policy`` (waiting
index, placement, KV working set, anti-starvation), the ``LengthEstimator`` fed with every
finished request (its estimate goes back to the core as the actor forwards
``EstimateUpdated``), and, with ``spec="group"``, the generator's speculation policy
(``make_draft_policy``: MBA) deciding each request's draft length from T(B, g) of the cost
model and per-request candidates whose acceptance comes from real suffix trees
(``AcceptanceTable``: a function of how many siblings are ahead, so it changes as siblings
finish). When the requests carry their recorded output (``SimRequest.token_ids``, a live
trace's), speculation replays on it step by step instead: each instance runs the live
generator's ``Speculator`` over real suffix trees of the siblings' tokens
(``pipeline.sim.replay``). Telemetry: after each chunk the core gets the instance's load,
as the actor does from ``ChunkFinished``. Emits a ``RolloutRecord`` (so ``compute_metrics`` and
``plot_timeline`` work on simulated runs as on live ones) plus counters.

Event loop: a heap of instance stretch ends (``SimInstance.plan``: many decode steps priced
at once); a chunk end calls the core, which may dispatch to other instances, whose current
stretch is then cut after the step in flight. ``dispatch_latency_s`` / ``result_latency_s``
delay a dispatch on its way to the engine and a result on its way to the scheduler (the
live control plane's hops; zero by default); ``start_latency_s`` is the live rollout's
start-up (its clock starts before it asks each generator for its load), ``step_overhead_s``
and ``report_s`` the generator's own time outside engine steps (``SimInstance``). Finish
times and the makespan are the engine's chunk end times, as the live record's are (the
generator's clock), so live and simulated tails are computed from the same event.
Deterministic for a given seed.
"""

from __future__ import annotations

import copy
import heapq
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from actors.drafts.options import SpecConfig
from actors.drafts.policy import Candidate, SpecPolicy, StepTime, make_draft_policy
from actors.estimator.core import LengthEstimator
from actors.generator.builtin.config import PARKED_EVICTIONS
from actors.generator.builtin.profile import StepProfile
from actors.generator.engine import StepDelta, StepResult
from actors.generator.speculator import Speculator
from actors.scheduler import InstanceLoad, Policy, RequestState, SchedulerCore, make_policy
from pipeline.sim.acceptance import AcceptanceTable, measure_acceptance
from pipeline.sim.costmodel import CostModel
from pipeline.sim.instance import Chunk, KvPool, SimInstance
from pipeline.sim.replay import ReplayClient, ReplayTrees, accepted_len
from transport.messages import (
    ChunkRecord,
    InstanceCounters,
    RequestRecord,
    RolloutRecord,
    SpecStats,
)

__all__ = ["SimConfig", "SimRequest", "SimResult", "recorded_step_times", "simulate"]

_REGRANT = 256  # verified drafts after which cached grants are recomputed
_OBSERVE = 4  # drafts verified per stretch for the speculation policy's calibration
_END, _RESULT, _ARRIVE = 0, 1, 2  # event kinds
_WARM = 600  # verified drafts a speculation policy has seen before the run


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRequest:
    request_id: str
    group_id: str
    prompt_id: str
    is_probe: bool
    prompt_len: int
    output_len: int  # the true length (engine and oracle only)
    max_new_tokens: int
    # the recorded output (a live trace's): grouped drafts then replay on it
    token_ids: tuple[int, ...] = ()
    # the prompt's last PROMPT_TAIL_TOKENS tokens: live, every sibling's sequence in the
    # group's suffix tree starts with them, and a draft's match starts in them
    prompt_tail: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Cluster and scheduler knobs. ``max_running_per_instance`` defaults to ``max_batch``;
    ``spec``: "off" or "group" (grouped speculation, MBA budget); ``max_steps``: the
    longest stretch of decode steps priced at once."""

    num_instances: int
    max_batch: int
    kv_capacity: int
    chunk_size: int
    max_running_per_instance: int | None = None
    kv_high_watermark: float = 0.9
    affinity_spread: int = 4
    growth_reserve: int | None = None
    starvation_s: float = 60.0
    starvation_every: int = 8
    kv_pool: KvPool = "local"
    spec: Literal["off", "group"] = "off"
    g_max: int = 8
    max_steps: int = 256
    # prefill tokens an instance runs per step (the engine's chunked prefill); None: a
    # whole prefill in one step
    max_prefill_tokens: int | None = None
    seed: int = 0
    dispatch_latency_s: float = 0.0  # scheduler decision -> the chunk reaches its engine
    result_latency_s: float = 0.0  # a chunk ends -> the scheduler has its result
    start_latency_s: float = 0.0  # the rollout's clock starts -> its first dispatch
    step_overhead_s: float = 0.0  # a generator's time between engine steps, per step
    report_s: float = 0.0  # a generator's time reporting one ended chunk
    # per instance, its steps' cost over the table's (a diagnostic replay: `seer sim
    # validate`'s speed-normalized makespan); empty = every instance at the table's price
    instance_speed: tuple[float, ...] = ()
    # per instance, (from s, factor) entries in time order: its engine steps planned from
    # that time on cost the factor times the table's price (on top of ``instance_speed``;
    # 1.0 before the first entry): the machine's speed as it varied through a live rollout
    # (`seer sim validate`'s paced diagnostic); empty = constant
    instance_pace: tuple[tuple[tuple[float, float], ...], ...] = ()
    # which parked KV an instance evicts first (the built-in engine's
    # ``EngineConfig.parked_eviction``: "queue" or "lru")
    parked_eviction: str = "queue"
    # per instance, the T(B, g) its speculation policy prices drafts by, as (B, g, seconds)
    # rows: what a live generator's policy read (its engine's start-up measurement,
    # recorded in the step log); empty = the table's T(B, g) at the workload's mean context
    spec_step_times: tuple[tuple[tuple[int, int, float], ...], ...] = ()
    # per instance, the decode batch sizes of the engine steps its live generator took
    # before this rollout with nothing to draft (the topology's warm-up rollout): fresh
    # replayed speculation policies count them (``can_pay``, once a step, as live), which
    # sets when the first exploration falls due; ignored when ``spec_state`` is given
    spec_prelude: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "dispatch_latency_s",
            "result_latency_s",
            "start_latency_s",
            "step_overhead_s",
            "report_s",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"SimConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("num_instances", "max_batch", "kv_capacity", "chunk_size", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"SimConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 1:
            raise ValueError(
                f"SimConfig.max_prefill_tokens must be >= 1 or None, got {self.max_prefill_tokens}"
            )
        if self.spec_step_times and len(self.spec_step_times) != self.num_instances:
            raise ValueError(
                f"SimConfig.spec_step_times has {len(self.spec_step_times)} tables for "
                f"{self.num_instances} instances"
            )
        if self.instance_pace and len(self.instance_pace) != self.num_instances:
            raise ValueError(
                f"SimConfig.instance_pace has {len(self.instance_pace)} paces for "
                f"{self.num_instances} instances"
            )
        if self.spec_prelude and len(self.spec_prelude) != self.num_instances:
            raise ValueError(
                f"SimConfig.spec_prelude has {len(self.spec_prelude)} step lists for "
                f"{self.num_instances} instances"
            )
        if self.parked_eviction not in PARKED_EVICTIONS:
            raise ValueError(
                f"SimConfig.parked_eviction must be one of {PARKED_EVICTIONS}, "
                f"got {self.parked_eviction!r}"
            )
        if self.spec not in ("off", "group"):
            raise ValueError(f"SimConfig.spec must be 'off' or 'group', got {self.spec!r}")
        if self.kv_pool not in ("local", "global"):
            raise ValueError(f"SimConfig.kv_pool must be 'local' or 'global', got {self.kv_pool!r}")


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


@dataclass(slots=True)
class SimResult:
    record: RolloutRecord
    counters: dict[str, int]  # the scheduler core's
    wall_s: float  # how long the simulation itself took
    cpu_s: float  # CPU time it took (on a shared machine the fairer figure)
    num_events: int
    extra: dict[str, Any] = field(default_factory=dict)


class _Run:
    def __init__(
        self,
        requests: Sequence[SimRequest],
        policy_name: str,
        config: SimConfig,
        cost: CostModel,
        acceptance: AcceptanceTable | None,
        policy_object: Policy | None = None,
        spec_state: Sequence[SpecPolicy] | None = None,
    ) -> None:
        if not requests:
            raise ValueError("simulate needs at least one request")
        self.reqs = list(requests)
        self.cfg = config
        self.index = {r.request_id: i for i, r in enumerate(self.reqs)}
        if len(self.index) != len(self.reqs):
            raise ValueError("duplicate request ids")
        limit = max(r.max_new_tokens for r in self.reqs)
        policy = policy_object or make_policy(
            policy_name,
            num_instances=config.num_instances,
            max_new_tokens=limit,
            true_lengths={r.request_id: r.output_len for r in self.reqs},
            starvation_s=config.starvation_s,
            starvation_every=config.starvation_every,
        )
        self.core = SchedulerCore(
            policy,
            config.num_instances,
            chunk_size=config.chunk_size,
            max_running_per_instance=config.max_running_per_instance or config.max_batch,
            kv_high_watermark=config.kv_high_watermark,
            affinity_spread=config.affinity_spread,
            growth_reserve=config.growth_reserve,
            global_kv=config.kv_pool == "global",
        )
        self.estimator = LengthEstimator(limit)
        self.members: dict[str, list[int]] = {}
        for i, r in enumerate(self.reqs):
            self.members.setdefault(r.group_id, []).append(i)
        for gid, idx in self.members.items():
            self.estimator.open_group(gid, self.reqs[idx[0]].prompt_id, len(idx))
        self.states = [
            RequestState(
                request_id=r.request_id,
                group_id=r.group_id,
                is_probe=r.is_probe,
                prompt_len=r.prompt_len,
                max_new_tokens=r.max_new_tokens,
                arrival=i,
            )
            for i, r in enumerate(self.reqs)
        ]
        if config.instance_speed and len(config.instance_speed) != config.num_instances:
            raise ValueError(
                f"instance_speed has {len(config.instance_speed)} factors for "
                f"{config.num_instances} instances"
            )
        self.instances = [
            SimInstance(
                i,
                cost.scaled(config.instance_speed[i]) if config.instance_speed else cost,
                max_batch=config.max_batch,
                kv_capacity=config.kv_capacity,
                kv_pool=config.kv_pool,
                max_steps=config.max_steps,
                max_prefill_tokens=config.max_prefill_tokens or 1 << 30,
                step_overhead_s=config.step_overhead_s,
                report_s=config.report_s,
                pace=config.instance_pace[i] if config.instance_pace else (),
                parked_eviction=config.parked_eviction,
            )
            for i in range(config.num_instances)
        ]
        self.cost = cost
        self.acceptance: AcceptanceTable | None = acceptance
        self.rng = random.Random(config.seed)
        self.spec: list[SpecPolicy] = []
        # recorded output: grouped drafts replay on it, step by step (``replay``)
        recorded = [r for r in self.reqs if r.token_ids]
        self.replay = config.spec == "group" and bool(recorded)
        if recorded and (
            len(recorded) < len(self.reqs) or any(len(r.token_ids) < r.output_len for r in recorded)
        ):
            raise ValueError("recorded tokens must cover every request's whole output")
        self.speculators: list[Speculator] = []
        self._chunk_of: dict[int, Chunk] = {}  # request -> its chunk dispatched or running
        self._started: set[int] = set()  # requests whose running chunk a speculator tracks
        if config.spec == "group":
            if not self.replay:
                acceptance = acceptance or measure_acceptance(g_max=config.g_max)
            self.acceptance = acceptance
            spec_cfg = SpecConfig(mode="group", g_max=config.g_max)
            mean_ctx = sum(r.prompt_len + r.output_len / 2 for r in self.reqs) / len(self.reqs)

            def step_time(b: int, g: float) -> float:
                return cost.decode_s(b, mean_ctx, g)

            times: list[StepTime] = [step_time] * len(self.instances)
            if config.spec_step_times:
                times = [recorded_step_times(rows) for rows in config.spec_step_times]
            padded = cost.pads_drafts  # as the live policy on the engine this table prices

            if self.replay:
                trees = self._trees = ReplayTrees(
                    [r.token_ids for r in self.reqs],
                    self.members,
                    self._generated,
                    spec_cfg,
                    [r.prompt_tail for r in self.reqs],
                )
                for priced in times:
                    replay = ReplayClient(trees, self.index)
                    speculator = Speculator(spec_cfg, priced, padded=padded, source=replay)
                    self.speculators.append(speculator)
                    self.spec.append(speculator.policy)
            else:
                self.spec = [make_draft_policy(spec_cfg, t, padded=padded) for t in times]
            for inst in self.instances:
                inst.on_batch = self._replay_drafts if self.replay else self._set_drafts
            if spec_state is not None:  # continue from an earlier rollout's policies
                if len(spec_state) != len(self.instances):
                    raise ValueError(
                        f"spec_state has {len(spec_state)} policies for "
                        f"{len(self.instances)} instances"
                    )
                self.spec = [copy.deepcopy(p) for p in spec_state]
                for speculator, spec_policy in zip(self.speculators, self.spec, strict=False):
                    speculator.policy = spec_policy
            elif acceptance is not None and not self.replay:  # warm: earlier iterations
                for spec_policy in self.spec:
                    self._warm(spec_policy, acceptance)
            elif self.replay:  # the steps a fresh live policy counted before this rollout
                for spec_policy, batches in zip(self.spec, config.spec_prelude, strict=False):
                    for batch in batches:
                        spec_policy.can_pay(batch)
        self._grants: list[dict[Any, dict[tuple[int, bool], int]]] = [{} for _ in self.instances]
        self._observed = [0] * len(self.instances)
        self.progress = [0.0] * len(self.reqs)
        self.chunks: list[ChunkRecord] = []
        self.finish_s = [0.0] * len(self.reqs)
        self.finish_reason = ["stop"] * len(self.reqs)
        # (time, seq, kind, instance, payload): kind _END (payload: the stretch's version),
        # _RESULT (a chunk's result reaches the scheduler), _ARRIVE (a chunk reaches its engine)
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.seq = 0
        self.num_events = 0

    # --- speculation -----------------------------------------------------------------------
    def _refs(self, r: int) -> int:
        mine = self.progress[r]
        return sum(
            1 for s in self.members[self.reqs[r].group_id] if s != r and self.progress[s] > mine
        )

    def _set_drafts(self, inst: SimInstance) -> None:
        """Each running chunk's draft length (the MBA policy's grant) and token rate.

        Requests whose trees are alike (the same reference count, probe or not) offer the
        policy the same candidates, so the policy's grant per kind of request (the median
        over its members) is reused for batches of about the same size (within 25%) whose
        kinds it has seen, until the policy has seen ``_REGRANT`` more verified drafts; a
        few drafts per stretch (``_OBSERVE``) are verified for its calibration."""
        table = self.acceptance
        assert table is not None
        policy = self.spec[inst.index]
        batch = len(inst.running)
        rows = [table.row(self._refs(c.request)) for c in inst.running]
        classes = [
            (row, self.reqs[c.request].is_probe) for row, c in zip(rows, inst.running, strict=True)
        ]
        key = int(math.log(batch) / math.log(1.25))
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
            members: dict[tuple[int, bool], list[int]] = {}
            for i, cls in enumerate(classes):
                members.setdefault(cls, []).append(grant.get(str(i), 0))
            fresh = {cls: int(statistics.median_low(gs)) for cls, gs in members.items()}
            per_class = cache[key] = {**(per_class or {}), **fresh}
        observed = 0
        for c, cls in zip(inst.running, classes, strict=True):
            g = per_class[cls]
            c.draft = g
            c.rate = table.expected_tokens(table.refs[cls[0]], g) if g else 1.0
        drafts = sum(c.draft for c in inst.running)
        if drafts:
            ctx = self.cost.batch_context([c.ctx for c in inst.running])
            gained = sum(c.rate - 1.0 for c in inst.running)
            with_drafts = (batch + gained) / self.cost.decode_s(batch, ctx, drafts / batch)
            if with_drafts <= batch / self.cost.decode_s(batch, ctx, 0):
                # a grant that does not pay is the policy exploring (or misjudging): live,
                # it holds for one step, then the policy decides again
                inst.one_step = True
                cache.pop(key, None)
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

    def _generated(self, r: int) -> int:
        """Tokens request ``r`` has generated so far, as the simulation stands."""
        c = self._chunk_of.get(r)
        if c is None:
            return self.states[r].generated
        return int(c.ctx + 0.5) - self.reqs[r].prompt_len

    def _replay_drafts(self, inst: SimInstance) -> None:
        """One engine step's speculation on recorded output: the instance's live
        ``Speculator`` drafts for the decoding rows and its policy grants; each granted draft
        is verified against the row's recorded continuation, and the step's tokens (accepted
        path and bonus token) set the row's rate for a stretch of one step."""
        spec = self.speculators[inst.index]
        decoding = [c for c in inst.running if c.sampled and not c.pending_prefill]
        for c in inst.running:
            c.draft, c.rate = 0, 1.0
            if c.request not in self._started:
                self._started.add(c.request)
                r = c.request
                req = self.reqs[r]
                n = self._generated(r)
                spec.start(
                    req.request_id,
                    req.group_id,
                    c.chunk_seq,
                    req.prompt_tail,
                    req.token_ids[:n],
                    req.is_probe,
                )
        if not decoding:
            return
        self._trees.begin_step()
        ids = [self.reqs[c.request].request_id for c in decoding]
        drafts = spec.drafts(ids)
        deltas = []
        for c, rid in zip(decoding, ids, strict=True):
            r = c.request
            pos = self._generated(r)
            tokens = self.reqs[r].token_ids
            draft = drafts.get(rid)
            left = max(1, round(c.target - c.done))
            ok = accepted_len(draft, tokens[pos : pos + left - 1]) if draft else 0
            if draft:
                c.draft = len(draft.token_ids)
            c.rate = float(1 + ok)
            made = tuple(tokens[pos : pos + 1 + ok])
            deltas.append(StepDelta(rid, made, (), c.draft, ok))
        spec.observe(StepResult(deltas=tuple(deltas), finished=()), ids)
        inst.one_step = True

    # --- the loop ----------------------------------------------------------------------------
    def _push(self, inst: SimInstance, end: float | None) -> None:
        if end is not None:
            self._event(end, _END, inst.index, inst.version)

    def _event(self, at: float, kind: int, instance: int, payload: Any) -> None:
        heapq.heappush(self.heap, (at, self.seq, kind, instance, payload))
        self.seq += 1

    def _plan(self, inst: SimInstance, now: float) -> None:
        self._push(inst, inst.plan(now))

    def _dispatch(self, now: float) -> None:
        touched: set[int] = set()
        for d in self.core.next_dispatches(now):
            r = self.index[d.request_id]
            st, spec = self.states[r], self.reqs[r]
            left = spec.output_len - st.generated
            target = min(d.max_chunk_tokens, left)
            chunk = Chunk(
                request=r,
                chunk_seq=d.chunk_seq,
                ctx=float(spec.prompt_len + st.generated),
                target=float(target),
                finishes=target >= left,
                dispatched_s=now,
                new_ctx=d.chunk_seq == 1,
            )
            self._chunk_of[r] = chunk
            if self.cfg.dispatch_latency_s > 0:
                self._event(now + self.cfg.dispatch_latency_s, _ARRIVE, d.instance, chunk)
                continue
            self.instances[d.instance].enqueue(chunk)
            touched.add(d.instance)
        for i in sorted(touched):
            self._wake(self.instances[i], now)

    def _wake(self, inst: SimInstance, now: float) -> None:
        """New work on `inst`: start a stretch, or cut the current one short."""
        if inst.seg_end is None:
            self._plan(inst, now)
        else:
            before = inst.version
            end = inst.cut(now)
            if inst.version != before:
                self._push(inst, end)

    def _chunk_ended(self, inst: SimInstance, c: Chunk, now: float) -> None:
        r = c.request
        spec, st = self.reqs[r], self.states[r]
        if r in self._started:
            self._started.discard(r)
            self.speculators[inst.index].end(spec.request_id)
        before = st.generated
        n = round(c.done) if not c.out_of_kv else int(c.done)
        finished = (c.finishes and n >= c.target - 1e-6) or c.out_of_kv
        self.core.on_chunk_finished(spec.request_id, inst.index, c.chunk_seq, n, finished, now)
        self.progress[r] = float(st.generated)
        self._chunk_of.pop(r, None)
        load = InstanceLoad(
            index=inst.index,
            num_running=len(inst.running),
            num_waiting=len(inst.waiting),
            kv_tokens_used=int(inst.kv_used_at(now)),
            kv_tokens_total=inst.kv_capacity,
            max_running=inst.max_batch,
        )
        self.core.update_load(load)
        done = st.status == "finished"
        reason = "chunk"
        if done:
            reason = "length" if c.out_of_kv or st.generated >= spec.max_new_tokens else "stop"
            # as live: a request finishes when its generator ends its last chunk (the
            # generator's clock), not when the scheduler hears of it
            self.finish_s[r], self.finish_reason[r] = c.ended_s, reason
            new = self.estimator.on_request_finished(spec.group_id, st.generated)
            if new is not None:
                self.core.update_estimate(spec.group_id, new)
        # verify steps are counted without speculation too (acceptance length 1.0), as live
        stats = SpecStats(
            num_steps=max(1, round(c.num_steps)),
            num_tokens=n,
            num_draft_tokens=round(c.num_draft_tokens),
            num_accepted_tokens=round(c.num_accepted_tokens),
        )
        self.chunks.append(
            ChunkRecord(
                request_id=spec.request_id,
                group_id=spec.group_id,
                instance=inst.index,
                chunk_seq=c.chunk_seq,
                dispatched_s=c.dispatched_s,
                start_s=max(c.start_s, c.dispatched_s),
                end_s=c.ended_s,
                num_new_tokens=n,
                prompt_len=spec.prompt_len,
                generated_before=before,
                num_reprefilled_tokens=c.reprefilled,
                finish_reason=reason,
                spec=stats,
            )
        )

    def run(self, policy_name: str) -> SimResult:
        start, cpu = time.perf_counter(), time.process_time()
        now = self.cfg.start_latency_s
        self.core.add(self.states, now)
        self._dispatch(now)
        for inst in self.instances:
            if inst.seg_end is None and inst.waiting:
                self._plan(inst, now)
        while self.heap:
            now, _, kind, i, payload = heapq.heappop(self.heap)
            inst = self.instances[i]
            if kind == _ARRIVE:
                inst.enqueue(payload)
                self._wake(inst, now)
                continue
            if kind == _RESULT:
                self._chunk_ended(inst, payload, now)
                self._dispatch(now)
                continue
            if payload != inst.version:
                continue
            self.num_events += 1
            for c in inst.finish():
                c.ended_s = now
                if self.cfg.result_latency_s > 0:
                    self._event(now + self.cfg.result_latency_s, _RESULT, i, c)
                else:
                    self._chunk_ended(inst, c, now)
            self._dispatch(now)
            if inst.seg_end is None:
                self._plan(inst, now)
        if not self.core.is_done:
            raise RuntimeError("simulation stalled with unfinished requests")
        # the makespan ends with the last chunk's end on its generator, as the live record's
        makespan = max((c.end_s for c in self.chunks), default=now)
        return SimResult(
            self._record(policy_name, makespan),
            dict(self.core.counters),
            time.perf_counter() - start,
            time.process_time() - cpu,
            self.num_events,
            {  # per instance: engine steps and the time inside them (for validation)
                "num_steps": [inst.counts["num_steps"] for inst in self.instances],
                "engine_s": [inst.engine_s for inst in self.instances],
                # each instance's speculation policy as the rollout left it (``spec_state``)
                "spec_policies": list(self.spec),
            },
        )

    def _record(self, policy_name: str, makespan: float) -> RolloutRecord:
        requests = tuple(
            RequestRecord(
                request_id=r.request_id,
                group_id=r.group_id,
                prompt_id=r.prompt_id,
                is_probe=r.is_probe,
                prompt_len=r.prompt_len,
                output_len=self.states[i].generated,
                arrival_s=0.0,
                finish_s=self.finish_s[i],
                finish_reason=self.finish_reason[i],
            )
            for i, r in enumerate(self.reqs)
        )
        instances = tuple(
            InstanceCounters(
                instance=inst.index,
                num_preemptions=inst.counts["num_preemptions"],
                num_recomputed_tokens=inst.counts["num_recomputed_tokens"],
                num_reprefilled_tokens=inst.counts["num_reprefilled_tokens"],
                num_draft_tokens=inst.counts["num_draft_tokens"],
                num_accepted_tokens=inst.counts["num_accepted_tokens"],
            )
            for inst in self.instances
        )
        return RolloutRecord(
            policy=policy_name,
            num_instances=len(self.instances),
            chunks=tuple(self.chunks),
            requests=requests,
            instances=instances,
            makespan_s=makespan,
        )


def simulate(
    requests: Sequence[SimRequest],
    policy: str,
    config: SimConfig,
    cost: CostModel,
    *,
    acceptance: AcceptanceTable | None = None,
    policy_object: Policy | None = None,
    spec_state: Sequence[SpecPolicy] | None = None,
) -> SimResult:
    """One simulated rollout of ``requests`` under ``policy`` (a ``make_policy`` name;
    ``policy_object``, if given, is the policy run instead and ``policy`` only its label:
    diagnostic variants, see ``pipeline.sim.gap``). Speculation policies: ``spec_state``
    (copies of an earlier rollout's, ``SimResult.extra["spec_policies"]``: a generator's
    policy lives on from one rollout to the next); else, on recorded tokens, fresh ones
    (a generator's first rollout), and on the acceptance table, warm ones."""
    return _Run(requests, policy, config, cost, acceptance, policy_object, spec_state).run(policy)
