"""The simulator's event loop: the live scheduler's objects driving simulated instances.

``simulate`` runs, unmodified, the objects the live scheduler actor runs: ``SchedulerCore``
with its policy from ``make_policy`` (waiting index, placement, KV working set,
anti-starvation) and the ``LengthEstimator`` fed with every finished request (its
estimate goes back to the core as the actor forwards ``EstimateUpdated``). After each
chunk the core gets the instance's load, as the actor does from ``ChunkFinished``.

Events: a heap of instance stretch ends (``SimInstance.plan``: many decode steps priced at
once); a chunk end calls the core, which may dispatch to other instances, whose current
stretch is then cut after the step in flight. ``dispatch_latency_s`` / ``result_latency_s``
delay a dispatch on its way to the engine and a result on its way to the scheduler (the
live control plane's hops; zero by default); ``start_latency_s`` is the live rollout's
start-up (its clock starts before it asks each generator for its load). Finish times and
the makespan are the engine's chunk end times, as the live record's are (the generator's
clock), so live and simulated tails are computed from the same event. Deterministic for a
given seed.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import Any

from actors.drafts.policy import SpecPolicy
from actors.estimator.core import LengthEstimator
from actors.generator.speculator import Speculator
from actors.scheduler import InstanceLoad, Policy, SchedulerCore, make_policy
from pipeline.sim.acceptance import AcceptanceTable
from pipeline.sim.costmodel import CostModel
from pipeline.sim.instance import Chunk, SimInstance
from pipeline.sim.simulator.config import SimConfig, SimRequest, SimResult
from pipeline.sim.simulator.record import Book, rollout_record
from pipeline.sim.simulator.speculation import Speculation

__all__ = ["simulate"]

_END, _RESULT, _ARRIVE = 0, 1, 2  # event kinds


class _Run:
    """One simulated rollout: its books, the scheduler's objects, the instances, the
    speculation side and the event heap."""

    def __init__(
        self,
        requests: Sequence[SimRequest],
        policy_name: str,
        config: SimConfig,
        cost: CostModel,
        acceptance: AcceptanceTable | None,
        policy_object: Policy | None = None,
        spec_state: Sequence[SpecPolicy] | None = None,
        estimator: LengthEstimator | None = None,
    ) -> None:
        self.book = Book.open(requests)
        self.reqs = self.book.reqs
        self.states = self.book.states
        self.cfg = config
        self.cost = cost
        limit = max(r.max_new_tokens for r in self.reqs)
        self.core = self._make_core(policy_object, policy_name, limit)
        self.estimator = estimator or LengthEstimator(limit)
        self.unfinished = {gid: len(idx) for gid, idx in self.book.members.items()}
        for gid, idx in self.book.members.items():
            self.estimator.open_group(gid, self.reqs[idx[0]].prompt_id, len(idx))
            start = self.estimator.estimate(gid)
            if start != limit:  # a prior: the estimator actor sends it when the group opens
                self.core.update_estimate(gid, start)
        self.instances = self._make_instances()
        self.speculation = Speculation(
            self.book, config, cost, acceptance, self.instances, spec_state
        )
        # (time, seq, kind, instance, payload): kind _END (payload: the stretch's version),
        # _RESULT (a chunk's result reaches the scheduler), _ARRIVE (a chunk reaches its engine)
        self.heap: list[tuple[float, int, int, int, Any]] = []
        self.seq = 0
        self.num_events = 0

    def _make_core(self, policy: Policy | None, policy_name: str, limit: int) -> SchedulerCore:
        config = self.cfg
        policy = policy or make_policy(
            policy_name,
            num_instances=config.num_instances,
            max_new_tokens=limit,
            true_lengths={r.request_id: r.output_len for r in self.reqs},
            starvation_s=config.starvation_s,
            starvation_every=config.starvation_every,
            long_band=config.long_band,
            probe_first=config.probe_first,
        )
        return SchedulerCore(
            policy,
            config.num_instances,
            chunk_size=config.chunk_size,
            max_running_per_instance=config.max_running_per_instance or config.max_batch,
            kv_high_watermark=config.kv_high_watermark,
            affinity_spread=config.affinity_spread,
            growth_reserve=config.growth_reserve,
            global_kv=config.kv_pool == "global",
        )

    def _make_instances(self) -> list[SimInstance]:
        config, cost = self.cfg, self.cost
        if config.instance_speed and len(config.instance_speed) != config.num_instances:
            raise ValueError(
                f"instance_speed has {len(config.instance_speed)} factors for "
                f"{config.num_instances} instances"
            )
        return [
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

    # the speculation side, as tests and callers see it
    @property
    def spec(self) -> list[SpecPolicy]:
        """Each instance's speculation policy."""
        return self.speculation.policies

    @property
    def speculators(self) -> list[Speculator]:
        """Each instance's live ``Speculator`` (replay on recorded output only)."""
        return self.speculation.speculators

    @property
    def replay(self) -> bool:
        """Whether grouped drafts replay on the requests' recorded output."""
        return self.speculation.replay

    # --- events ------------------------------------------------------------------------------
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
            r = self.book.index[d.request_id]
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
            self.book.chunk_of[r] = chunk
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
        """A chunk's result reaches the scheduler: the core, the load, the books."""
        r = c.request
        st = self.states[r]
        self.speculation.on_chunk_ended(inst.index, r)
        before = st.generated
        n = round(c.done) if not c.out_of_kv else int(c.done)
        finished = (c.finishes and n >= c.target - 1e-6) or c.out_of_kv
        rid = self.reqs[r].request_id
        self.core.on_chunk_finished(rid, inst.index, c.chunk_seq, n, finished, now)
        self.book.progress[r] = float(st.generated)
        self.book.chunk_of.pop(r, None)
        self.core.update_load(
            InstanceLoad(
                index=inst.index,
                num_running=len(inst.running),
                num_waiting=len(inst.waiting),
                kv_tokens_used=int(inst.kv_used_at(now)),
                kv_tokens_total=inst.kv_capacity,
                max_running=inst.max_batch,
            )
        )
        reason = "chunk"
        if st.status == "finished":
            reason = self._request_finished(r, c)
        self.book.add_chunk(inst.index, c, n, before, reason)

    def _request_finished(self, r: int, c: Chunk) -> str:
        """Request ``r`` finished with chunk ``c``: its finish in the books, its length to
        the estimator; returns why it finished."""
        spec, st = self.reqs[r], self.states[r]
        reason = "length" if c.out_of_kv or st.generated >= spec.max_new_tokens else "stop"
        # as live: a request finishes when its generator ends its last chunk (the
        # generator's clock), not when the scheduler hears of it
        self.book.finish_s[r], self.book.finish_reason[r] = c.ended_s, reason
        new = self.estimator.on_request_finished(spec.group_id, st.generated)
        self.unfinished[spec.group_id] -= 1
        if not self.unfinished[spec.group_id]:  # as the estimator actor: its prompt's prior
            self.estimator.close_group(spec.group_id)
        if new is not None:
            self.core.update_estimate(spec.group_id, new)
        return reason

    def _handle(self, now: float, kind: int, i: int, payload: Any) -> None:
        """One event off the heap."""
        inst = self.instances[i]
        if kind == _ARRIVE:
            inst.enqueue(payload)
            self._wake(inst, now)
            return
        if kind == _RESULT:
            self._chunk_ended(inst, payload, now)
            self._dispatch(now)
            return
        if payload != inst.version:  # a stretch since cut short
            return
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

    # --- the loop ----------------------------------------------------------------------------
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
            self._handle(now, kind, i, payload)
        if not self.core.is_done:
            raise RuntimeError("simulation stalled with unfinished requests")
        # the makespan ends with the last chunk's end on its generator, as the live record's
        makespan = max((c.end_s for c in self.book.chunks), default=now)
        return SimResult(
            rollout_record(
                self.book, self.instances, policy_name, makespan, self.core.first_estimates
            ),
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


def simulate(
    requests: Sequence[SimRequest],
    policy: str,
    config: SimConfig,
    cost: CostModel,
    *,
    acceptance: AcceptanceTable | None = None,
    policy_object: Policy | None = None,
    spec_state: Sequence[SpecPolicy] | None = None,
    estimator: LengthEstimator | None = None,
) -> SimResult:
    """One simulated rollout of ``requests`` under ``policy`` (a ``make_policy`` name;
    ``policy_object``, if given, is the policy run instead and ``policy`` only its label:
    diagnostic variants, see ``pipeline.sim.gap``). Speculation policies: ``spec_state``
    (copies of an earlier rollout's, ``SimResult.extra["spec_policies"]``: a generator's
    policy lives on from one rollout to the next); else, on recorded tokens, fresh ones
    (a generator's first rollout), and on the acceptance table, warm ones. ``estimator``:
    the length estimator to feed (one that lives on from earlier rollouts keeps its
    per-prompt priors, ``use_prior``); else a fresh one. Its groups are opened here and
    closed as their last request finishes, as the estimator actor does."""
    run = _Run(requests, policy, config, cost, acceptance, policy_object, spec_state, estimator)
    return run.run(policy)
