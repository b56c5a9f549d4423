"""SchedulerActor: the request buffer and the dispatch loop of a rollout.

Consumes `RequestsAdded` (splitter), `ChunkFinished` (generators), `EstimateUpdated`
(estimator), `EnvironmentResult` (environment actors: multi-turn episodes, `turns.py`),
`WeightsPublished` (driver), `CancelRollout` (driver: it stopped waiting; the rollout ends
at once, its later results are dropped as unknown). Emits `ChunkAssigned` to generators,
`RequestFinished` to the estimator, `GroupsClosed` to the draft store (when the topology
has one), `EndRollout` to generators, `EnvironmentReset`/`Step`/`Close` to environment
actors and `RolloutPart`s then `RolloutFinished` (or `RolloutFailed`) to the driver.
Decisions live in the pure `SchedulerCore` and its policy; this shell keeps each request's
tokens, logprobs and timing, and the rollout record.

Faults (docs/faults-security.md tells each case): a stale or unknown chunk result is
dropped; "error" (the request is bad, or a result refused at the boundary) ends its sample;
"abort" or an overdue result requeues the chunk from its committed progress; a generator
failing chunks in a row, or unreachable (`PeerGone`), is lost and its work requeued
(`FaultBook`); the estimator and draft store are best-effort peers, never waited on; any
other handler failure fails the rollout (`RolloutFailed`). Direct dispatch (Earl): a rollout
announced with `StreamToRanks` streams each finished sample, scored, to a trainer rank
(`SampleStream`). Weights: a generator without the current version gets no work; a lost one
that answers again is back at once with the current weights, else the trainer is asked to
push them to it (`RepublishWeights`), or it waits for the next publication.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Mapping

import anyio

from actors.base import ActorContext, Handler
from actors.dispatcher.stream import SampleStream, StreamError, load_scorer
from actors.scheduler.active import ActiveRollout
from actors.scheduler.core import SchedulerCore, UnknownRequestError
from actors.scheduler.faults import FaultBook
from actors.scheduler.options import SchedulerOptions
from actors.scheduler.policy import make_policy
from actors.scheduler.results import result_messages
from actors.scheduler.runbook import RunBook
from actors.scheduler.turns import TurnTaking
from actors.scheduler.wire import chunk_assigned, instance_load, request_state
from transport.errors import PeerGone, TransportError
from transport.messages import (
    CancelRollout,
    ChunkFinished,
    EndRollout,
    EnvironmentResult,
    EstimateUpdated,
    GetLiveGenerators,
    GetLoad,
    GroupsClosed,
    LiveGenerators,
    LoadInfo,
    LoadReport,
    Message,
    PeerLost,
    RepublishWeights,
    RequestsAdded,
    RolloutFailed,
    SampleResult,
    StreamToRanks,
    WeightsPublished,
)


class SchedulerActor(TurnTaking):
    role = "scheduler"
    Options = SchedulerOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: SchedulerOptions = ctx.options or SchedulerOptions()
        self.weight_version = 0
        self.current: ActiveRollout | None = None
        self.num_unknown_results = 0
        self.totals: dict[str, float] = {}  # core counters summed over finished rollouts
        self.num_generators = self.num_peers("generator")
        self.last_loads: dict[int, LoadInfo] = {}
        self.down: set[int] = set()  # generators that stopped answering
        self.rejoining: set[int] = set()  # lost generators being probed / sent weights
        self.num_refused_results = 0
        # estimates that arrived before their rollout's requests (the estimator can answer
        # `GroupsOpened` before the splitter's `RequestsAdded` gets here): rollout -> group
        self.early_estimates: dict[str, dict[str, int]] = {}
        self.streams: dict[str, StreamToRanks] = {}  # announced, not yet started: rollout id
        self.cancelled = ""  # a rollout cancelled before its requests arrived
        self.faults = FaultBook.of(self.opts)
        self.env_down: set[int] = set()  # environment actors lost (`turns.py`)

    async def on_peers_changed(self, role: str, count: int) -> None:
        """New generators (a layout switch, between rollouts): a fresh generator set; new
        environment actors: none is lost."""
        if role == "environment":
            self.env_down.clear()
        if role != "generator":
            return
        if self.current is not None:
            raise RuntimeError("generators cannot change during a rollout")
        self.num_generators = count
        self.last_loads, self.down, self.rejoining = {}, set(), set()
        self.faults.reset()

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            RequestsAdded: self.handle_requests_added,
            ChunkFinished: self.handle_chunk_finished,
            EstimateUpdated: self.handle_estimate_updated,
            WeightsPublished: self.handle_weights_published,
            PeerLost: self.handle_peer_lost,
            GetLiveGenerators: self.handle_get_live_generators,
            StreamToRanks: self.handle_stream_to_ranks,
            CancelRollout: self.handle_cancel_rollout,
            EnvironmentResult: self.handle_environment_result,
        }

    def counters(self) -> dict[str, float]:
        out = dict(self.totals)  # (the running rollout's episode counts: `episode_counters`)
        if self.current is not None:
            for k, v in self.current.core.counters.items():
                out[k] = out.get(k, 0.0) + v
        out["unknown_results"] = self.num_unknown_results
        out["refused_results"] = self.num_refused_results
        out["failed_chunks"] = self.faults.num_failed_chunks
        out["generators_lost"] = len(self.down)
        return out | self.episode_counters()

    async def handle_weights_published(self, msg: WeightsPublished) -> None:
        self.weight_version = msg.version
        for i in msg.missed:
            if 0 <= i < self.num_generators and i not in self.down:
                self.down.add(i)
                self.log.warning("generator_missed_weights", instance=i, version=msg.version)
                if self.current is not None:
                    await self._lose(self.current, i, "missed weights")

    async def handle_get_live_generators(self, msg: GetLiveGenerators) -> LiveGenerators:
        """The generators to publish to: every one that answers a probe now (all probed at
        once; a frozen one costs `health_timeout_s`, not the publisher's long call). Lost
        ones that answer take the new weights and are back (see `_load_or_last`)."""
        answers: dict[int, bool] = {}

        async def probe(i: int) -> None:
            try:
                await self._load(i, timeout=self.opts.health_timeout_s)
            except TransportError:
                answers[i] = False
            else:
                answers[i] = True

        async with anyio.create_task_group() as tg:
            for i in range(self.num_generators):
                tg.start_soon(probe, i)
        live = tuple(i for i in range(self.num_generators) if answers.get(i))
        return LiveGenerators(instances=live, weight_version=self.weight_version)

    async def handle_peer_lost(self, msg: PeerLost) -> None:
        """A launcher saw a generator die (Ray's liveness): the path of a generator that
        stops answering, without waiting for the health check."""
        i = msg.index
        if msg.role == "environment":
            await self.on_environment_lost(i)
            return
        if msg.role != "generator" or not 0 <= i < self.num_generators or i in self.down:
            return
        self.down.add(i)
        if self.current is not None:
            await self._lose(self.current, i, msg.reason or "reported lost by the launcher")

    async def handle_stream_to_ranks(self, msg: StreamToRanks) -> None:
        """Stream rollout `msg.rollout_id` to the trainer ranks (refused with a typed error
        when there is no scorer or too few ranks)."""
        if not self.opts.scorer:
            raise StreamError("the scheduler has no scorer option: it cannot score samples")
        if not 1 <= msg.num_ranks <= self.num_peers("trainer"):
            have = self.num_peers("trainer")
            raise StreamError(f"{msg.num_ranks} trainer ranks asked, the topology has {have}")
        await anyio.to_thread.run_sync(self._import_streaming)  # at once if done at start
        # fail now, not on a sample; off the loop: a text task's first build loads a tokenizer
        await anyio.to_thread.run_sync(load_scorer, self.opts.scorer, msg.task, msg.model_dir)

        self.streams = {msg.rollout_id: msg}  # one rollout at a time

    def _open_stream(self, rollout_id: str) -> SampleStream | None:
        msg = self.streams.pop(rollout_id, None)
        if msg is None:
            return None
        reward = load_scorer(self.opts.scorer, msg.task, msg.model_dir)
        timeout = self.opts.health_timeout_s * 10
        return SampleStream(self.mailbox, msg, reward, send_timeout_s=timeout)

    async def handle_cancel_rollout(self, msg: CancelRollout) -> None:
        """The driver gave up on this rollout: end it now (no more chunks; the generators
        drop its parked KV, the draft store its trees), or refuse its requests later."""
        run = self.current
        if run is None or run.rollout_id != msg.rollout_id:
            self.cancelled = msg.rollout_id
            return
        self.current = None
        self._add_totals(run)
        self.log.warning("rollout_cancelled", rollout=run.rollout_id)
        open_groups = tuple(g for g, left in run.unfinished.items() if left)
        if open_groups and self.has_peer("drafts"):
            self.offer("drafts", 0, GroupsClosed(rollout_id=run.rollout_id, group_ids=open_groups))
        self._close_all_episodes(run)
        await self._end_on_generators(run)

    async def handle_requests_added(self, msg: RequestsAdded) -> None:
        if msg.rollout_id == self.cancelled:  # the driver gave up before they got here
            self.log.warning("rollout_cancelled", rollout=msg.rollout_id)
            if self.has_peer("drafts"):
                groups = tuple(dict.fromkeys(r.group_id for r in msg.requests))
                self.offer("drafts", 0, GroupsClosed(rollout_id=msg.rollout_id, group_ids=groups))
            return
        if self.current is not None:
            reason = f"rollout {self.current.rollout_id} still running"
            await self.send_to("driver", 0, RolloutFailed(rollout_id=msg.rollout_id, reason=reason))
            return
        try:
            await self._start(msg)
        except Exception as exc:  # the driver must hear of it rather than wait forever
            self.current = None
            reason = f"{type(exc).__name__}: {exc}"
            await self.send_to("driver", 0, RolloutFailed(rollout_id=msg.rollout_id, reason=reason))
            raise
        finally:
            self.early_estimates.pop(msg.rollout_id, None)

    async def _start(self, msg: RequestsAdded) -> None:
        name = msg.policy or self.opts.policy
        limit = max(r.sampling.max_new_tokens for r in msg.requests)
        if name == "oracle" and not all(r.forced_len for r in msg.requests):
            raise ValueError(
                "policy 'oracle' needs every request's true length (forced lengths, as the "
                "benchmarks set); without them it would silently be 'fewest generated first'"
            )
        true_lengths = {r.request_id: r.forced_len or limit for r in msg.requests}
        policy = make_policy(
            name,
            num_instances=self.num_generators,
            max_new_tokens=limit,
            true_lengths=true_lengths if name == "oracle" else None,
            starvation_s=self.opts.starvation_s,
            starvation_every=self.opts.starvation_every,
            long_band=self.opts.long_band,
            probe_first=self.opts.probe_first,
        )
        core = SchedulerCore(
            policy,
            self.num_generators,
            chunk_size=self.opts.chunk_size,
            max_running_per_instance=self.opts.max_running_per_instance,
            kv_high_watermark=self.opts.kv_high_watermark,
            affinity_spread=self.opts.affinity_spread,
            growth_reserve=self.opts.growth_reserve,
            sticky_turns=self.opts.sticky_turns if msg.sticky_turns is None else msg.sticky_turns,
        )
        episodes = self._open_episodes(msg.requests, msg.rollout_id in self.streams)
        start = time.time()
        start_loads = [await self._load_or_last(i) for i in range(self.num_generators)]
        book = RunBook(msg.rollout_id, name, msg.requests, start_loads, start)
        self.current = ActiveRollout(msg.rollout_id, core, book, name, episodes=episodes)
        self.faults.deadlines.clear()
        self.current.stream = self._open_stream(msg.rollout_id)
        for r in msg.requests:
            self.current.unfinished[r.group_id] = self.current.unfinished.get(r.group_id, 0) + 1
        for load in start_loads:
            core.update_load(instance_load(load))
        for i in self.down:  # lost in an earlier rollout: nothing goes there
            core.requeue_instance(i, 0.0, mark_down=True)
        now = time.time() - start
        core.add([request_state(r, i) for i, r in enumerate(msg.requests)], now)
        for group_id, estimate in self.early_estimates.get(msg.rollout_id, {}).items():
            core.update_estimate(group_id, estimate)
        book.arrive([r.request_id for r in msg.requests], now)
        self.log.info(
            "rollout_started", rollout=msg.rollout_id, policy=name, requests=len(msg.requests)
        )
        await self._reset_episodes(self.current)
        await self._send_chunks()

    async def handle_estimate_updated(self, msg: EstimateUpdated) -> None:
        if self.current is None or msg.rollout_id != self.current.rollout_id:
            if self.current is None:  # its RequestsAdded is on the way: keep it (one rollout)
                early = self.early_estimates
                if msg.rollout_id not in early:
                    early.clear()
                early.setdefault(msg.rollout_id, {})[msg.group_id] = msg.estimate
            return
        self.current.core.update_estimate(msg.group_id, msg.estimate)
        await self._send_chunks()

    async def handle_chunk_finished(self, msg: ChunkFinished) -> None:
        run = self.current
        if run is None or msg.rollout_id != run.rollout_id:
            self.num_unknown_results += 1
            self.log.warning("chunk_result_unknown", request=msg.request_id, rollout=msg.rollout_id)
            return
        try:
            await self._on_chunk_finished(run, msg)
        except Exception as exc:
            if self.current is run:  # fail the rollout rather than leave it running forever
                await self._abandon(run, f"scheduler failed on a chunk result: {exc!r}")
            raise

    def _refusal(self, run: ActiveRollout, msg: ChunkFinished) -> str:
        """Why a chunk result cannot be taken as it is ("" when it can)."""
        if len(msg.logprobs) != len(msg.token_ids):
            return f"{len(msg.logprobs)} logprobs for {len(msg.token_ids)} tokens"
        allowed = run.core.chunk_allowance(msg.request_id, msg.instance, msg.chunk_seq)
        if allowed is not None and len(msg.token_ids) > allowed:
            return f"{len(msg.token_ids)} new tokens, the chunk allowed {allowed}"
        return ""

    async def _on_chunk_finished(self, run: ActiveRollout, msg: ChunkFinished) -> None:
        now = time.time() - run.book.start
        try:
            refusal = self._refusal(run, msg)
        except UnknownRequestError:
            refusal = ""  # counted below
        if refusal:  # the sample ends in "error", keeping what it had
            self.num_refused_results += 1
            self.log.warning("chunk_result_refused", request=msg.request_id, reason=refusal)
            error = f"result refused: {refusal}"
            msg = dataclasses.replace(
                msg, token_ids=(), logprobs=(), finish_reason="error", error=error
            )
        self.faults.deadlines.pop((msg.request_id, msg.chunk_seq), None)
        if msg.finish_reason == "abort":  # not the request's doing: it goes again
            why = msg.error or "aborted by its engine"
            num_faults = run.faults.get(msg.request_id, 0) + 1
            if num_faults < self.opts.max_chunk_faults:
                key = (msg.request_id, msg.instance, msg.chunk_seq)
                if not await self._chunk_failed(run, key, why, msg.load):
                    self.log.warning("chunk_result_stale", request=msg.request_id)
                return
            error = f"its chunks failed {num_faults} times, the last: {why}"
            msg = dataclasses.replace(
                msg, token_ids=(), logprobs=(), finish_reason="error", error=error
            )
        finished = msg.finish_reason != "chunk"
        turn = self._turn_end(run, msg)
        if turn == "step":
            finished = False  # the episode goes on after its environment's answer
        try:
            verdict = run.core.on_chunk_finished(
                msg.request_id, msg.instance, msg.chunk_seq, len(msg.token_ids), finished, now
            )
        except UnknownRequestError:
            self.num_unknown_results += 1
            self.log.warning("chunk_result_unknown", request=msg.request_id)
            return
        if verdict == "stale":
            self.log.warning("chunk_result_stale", request=msg.request_id, seq=msg.chunk_seq)
            return
        run.core.update_load(instance_load(msg.load))
        self.last_loads[msg.instance] = msg.load
        dispatched = run.dispatched.pop((msg.request_id, msg.chunk_seq), 0.0)
        run.book.add_chunk(msg, dispatched, finished=finished)
        if run.episodes is not None and msg.request_id in run.episodes:
            run.episodes.on_chunk(msg.request_id, len(msg.token_ids), msg.weight_version)
        if msg.finish_reason != "error":
            self.faults.served(msg.instance, now - dispatched, len(msg.token_ids))
            run.faults.pop(msg.request_id, None)  # its failures in a row
        if msg.error:
            self.log.warning("chunk_failed", request=msg.request_id, error=msg.error)
        if turn == "step" and not await self._turn_ended(run, msg.request_id):
            return  # (else the chunk's slot is free for others, below)
        if turn == "end" and run.episodes is not None:
            self._close_episode(run, msg.request_id, run.episodes.ended(msg.request_id))
        if finished and not await self._request_done(run, msg.request_id, msg.finish_reason):
            return
        if run.core.is_done:
            await self._finish(run)
        else:
            await self._send_chunks()

    async def _send_chunks(self) -> None:
        run = self.current
        if run is None:
            return
        lost: list[int] = []
        now = time.time() - run.book.start
        for d in run.core.next_dispatches(now):
            spec = run.book.specs[d.request_id]
            run.dispatched[(d.request_id, d.chunk_seq)] = now
            self.faults.dispatched(d.request_id, d.chunk_seq, d.instance, d.max_chunk_tokens, now)
            msg = chunk_assigned(run.rollout_id, d, spec, run.book, self.weight_version)
            if d.instance in lost:
                continue  # re-queued below with the rest of its chunks
            try:
                await self.send_to("generator", d.instance, msg)
            except PeerGone as exc:
                self.log.error("chunk_undeliverable", instance=d.instance, error=str(exc))
                lost.append(d.instance)
        for i in lost:
            self.down.add(i)
            if self.current is run:
                await self._lose(run, i, "chunk undeliverable")

    async def _chunk_failed(
        self, run: ActiveRollout, key: tuple[str, int, int], why: str, load: LoadInfo | None
    ) -> bool:
        """Chunk `key` (request, instance, seq) will not finish (aborted, overdue): re-queue
        it from its committed progress; its generator is lost after `max_instance_faults`
        failures in a row. False when that chunk is not the one running."""
        rid, instance, seq = key
        if run.core.requeue_chunk(rid, instance, seq, time.time() - run.book.start) == "stale":
            return False
        run.dispatched.pop((rid, seq), None)
        if load is not None:
            run.core.update_load(instance_load(load))
            self.last_loads[instance] = load
        run.faults[rid] = run.faults.get(rid, 0) + 1
        self.log.warning("chunk_requeued", request=rid, instance=instance, seq=seq, error=why)
        n = self.faults.failed(instance)
        if n and instance not in self.down:
            self.down.add(instance)
            await self._lose(run, instance, f"{n} chunks failed in a row, the last: {why}")
        else:
            await self._send_chunks()
        return True

    async def _lose(self, run: ActiveRollout, instance: int, why: str) -> None:
        """Generator `instance` is lost: its chunks go back to waiting and run elsewhere
        (the rollout fails when no generator is left)."""
        now = time.time() - run.book.start
        ids = run.core.requeue_instance(instance, now, mark_down=True)
        self.log.error("generator_lost", instance=instance, error=why, requeued=len(ids))
        if len(self.down) >= self.num_generators:
            await self._abandon(run, "every generator stopped answering")
            return
        await self._send_chunks()

    async def _finish(self, run: ActiveRollout) -> None:
        if run.stream is not None:
            try:
                await run.stream.flush(self.opts.health_timeout_s * 10)
            except Exception as exc:
                await self._abandon(run, f"direct dispatch failed: {exc}")
                return
        self.current = None
        self.faults.faulty.clear()  # the next rollout tries them again
        self._add_totals(run)
        end_loads = [await self._load_or_last(i) for i in range(self.num_generators)]
        record = run.book.record(end_loads, run.core.first_estimates)
        episodes = run.episodes
        samples = run.book.samples(
            {rid: episodes.result(rid) for rid in episodes.episodes} if episodes else None
        )
        self._close_all_episodes(run)
        await self._end_on_generators(run)
        self.log.info(
            "rollout_finished",
            rollout=run.rollout_id,
            policy=run.policy,
            makespan_s=round(record.makespan_s, 3),
        )
        stream = None
        if run.stream is not None:  # the tokens went to the ranks: the driver gets none
            samples = tuple(_without_tokens(s) for s in samples)
            stream = run.stream.summary()
        limit = self.opts.result_message_bytes  # bounded messages, the last RolloutFinished
        for msg in result_messages(run.rollout_id, samples, record, stream, limit):
            await self.send_to("driver", 0, msg)

    async def _end_on_generators(self, run: ActiveRollout) -> None:
        """Tell every live generator the rollout ended (it drops its requests' parked KV)."""
        ids = tuple(run.book.specs)
        for i in range(self.num_generators):
            if i in self.down:
                continue
            try:
                await self.send_to(
                    "generator", i, EndRollout(rollout_id=run.rollout_id, request_ids=ids)
                )
            except PeerGone as exc:  # it is noticed (and lost) when the next rollout starts
                self.log.warning("end_rollout_undeliverable", instance=i, error=str(exc))

    async def _abandon(self, run: ActiveRollout, reason: str) -> None:
        """Fail the rollout rather than wait forever: the driver gets `RolloutFailed`."""
        self.current = None
        self.faults.faulty.clear()
        self._close_all_episodes(run)
        self.log.error("rollout_failed", rollout=run.rollout_id, reason=reason)
        await self.send_to("driver", 0, RolloutFailed(rollout_id=run.rollout_id, reason=reason))

    async def _load(self, instance: int, timeout: float = 30.0) -> LoadInfo:
        reply = await self.call("generator", instance, GetLoad(), timeout=timeout)
        if not isinstance(reply, LoadReport):
            kind = type(reply).__name__
            raise TransportError(f"generator {instance} answered GetLoad with {kind}")
        self.last_loads[instance] = reply.load
        return reply.load

    async def _load_or_last(self, instance: int) -> LoadInfo:
        """A fresh load report; a generator marked lost that answers again is back."""
        try:
            report = await self._load(instance, timeout=self.opts.health_timeout_s)
        except TransportError:
            self.down.add(instance)
        else:
            if instance in self.down and report.weight_version == self.weight_version:
                self.down.discard(instance)
                self.log.warning("generator_back", instance=instance)
            elif instance in self.down:  # no work before the current weights reach it
                self._rejoin_soon(instance)
            return report
        if instance not in self.last_loads:
            raise RuntimeError(f"generator {instance} is not answering")
        return self.last_loads[instance]

    async def on_start(self) -> None:
        if self.opts.scorer and self.num_peers("trainer") > 1:  # direct dispatch likely:
            await anyio.to_thread.run_sync(self._import_streaming)  # imports before ready
        self.start_soon(self._watch_generators)
        if self.has_peer("environment"):
            self.start_soon(self._watch_environments)

    def _import_streaming(self) -> None:
        """The scorer's module and the dispatcher (torch) take seconds to import: do it at
        start rather than inside the first streamed rollout."""
        importlib.import_module("actors.dispatcher.actor")
        try:
            importlib.import_module(self.opts.scorer.partition(":")[0])
        except ImportError as exc:  # a streamed rollout is refused with the reason
            self.log.warning("scorer_unavailable", scorer=self.opts.scorer, error=str(exc))

    def _rejoin_soon(self, instance: int) -> None:
        if instance not in self.rejoining:
            self.rejoining.add(instance)
            self.start_soon(self._rejoin, instance)

    async def _rejoin(self, instance: int) -> None:
        """Bring lost generator `instance` back if it answers: with the current weights at
        once, with older ones after the trainer pushed the current ones to it."""
        republished = False
        try:
            load = await self._load(instance, timeout=self.opts.health_timeout_s)
            if load.weight_version != self.weight_version and self.has_peer("trainer"):
                self.log.warning(
                    "generator_back_stale_weights",
                    instance=instance,
                    has=load.weight_version,
                    current=self.weight_version,
                )
                ask = RepublishWeights(instance=instance)
                await self.call("trainer", 0, ask, timeout=self.opts.republish_timeout_s)
                republished = True
                load = await self._load(instance, timeout=self.opts.health_timeout_s)
        except TransportError as exc:  # still lost (or the trainer could not): next probe
            self.log.info("generator_still_lost", instance=instance, error=str(exc))
            return
        finally:
            self.rejoining.discard(instance)
        if instance not in self.down or load.weight_version != self.weight_version:
            return  # older weights and no trainer: the next publication brings it back
        if instance in self.faults.faulty and not republished:
            return  # its chunks kept failing: not again in this rollout
        self.faults.back(instance)
        self.down.discard(instance)
        self.log.warning("generator_back", instance=instance, version=load.weight_version)
        run = self.current
        if run is not None:
            run.core.update_load(instance_load(load))  # up again for the core too
            await self._send_chunks()

    async def _watch_generators(self) -> None:
        """A generator that stops answering loses no sample: its running chunks go back to
        the buffer from their last committed progress and run elsewhere."""
        while True:
            await anyio.sleep(self.opts.health_interval_s)
            run = self.current
            if run is None:
                continue
            for key in self.faults.overdue(time.time() - run.book.start):  # lost results
                if run.core.chunk_allowance(*key) is not None and self.current is run:
                    await self._chunk_failed(run, key, "chunk result overdue", None)
            if self.current is not run:
                continue
            for i in self.down:
                self._rejoin_soon(i)
            for i in range(self.num_generators):
                if i in self.down or not run.core.projected_load(i).num_running:
                    continue
                try:
                    await self._load(i, timeout=self.opts.health_timeout_s)
                except TransportError as exc:
                    self.down.add(i)
                    if self.current is not run:
                        break
                    await self._lose(run, i, str(exc))
                    if self.current is not run:
                        break


def _without_tokens(sample: SampleResult) -> SampleResult:
    return dataclasses.replace(sample, token_ids=(), logprobs=())
