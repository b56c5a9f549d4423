"""TurnTaking: the scheduler actor's side of multi-turn episodes (docs/multiturn.md), and
what it does when any request completes (`_request_done`).

A base of `SchedulerActor`. At a rollout's start each episode is held (`SchedulerCore.hold`)
and its environment is reset on an environment actor (the one with the fewest open
episodes; the episode stays there). When a turn ends (a stop token, or the turn's token
budget), the request is held again and its action tokens go to its environment
(`EnvironmentStep`); the answer (`EnvironmentResult`) either appends the observation to the
request's context with loss mask 0 and resumes it (back into the scheduler's order, sticky
to the generator holding its KV) or ends the episode. An environment that fails ends its
episode with its reason, scored 0; an environment actor that does not answer within
`environment_timeout_s` (or is unreachable, or reported lost) is lost: the episodes
awaiting it end "env_lost" at once, those still generating at their turn's end, and new
episodes go to the other environment actors. No sample is lost: every episode ends with a
reason, counted (`episodes_<reason>`). Ended episodes' environments are closed.
"""

from __future__ import annotations

import time

import anyio

from actors.base import Actor
from actors.scheduler.active import ActiveRollout
from actors.scheduler.episodes import Episodes
from actors.scheduler.options import SchedulerOptions
from transport.errors import TransportError
from transport.messages import (
    ChunkFinished,
    EnvironmentClose,
    EnvironmentReset,
    EnvironmentResult,
    EnvironmentStep,
    EpisodeEnd,
    GroupsClosed,
    RequestFinished,
    RequestSpec,
)


class TurnTaking(Actor):
    """Multi-turn episodes for the scheduler actor (see the module)."""

    current: ActiveRollout | None
    opts: SchedulerOptions
    num_unknown_results: int
    totals: dict[str, float]  # counters summed over finished rollouts
    env_down: set[int]  # environment actors lost: no episode goes there again

    async def _send_chunks(self) -> None:
        raise NotImplementedError

    async def _abandon(self, run: ActiveRollout, reason: str) -> None:
        raise NotImplementedError

    async def _finish(self, run: ActiveRollout) -> None:
        raise NotImplementedError

    def _turn_end(self, run: ActiveRollout, msg: ChunkFinished) -> str:
        """For a multi-turn episode's chunk: "no" (its turn goes on), "step" or "end" (see
        `Episodes.turn_end`); "" for any other request."""
        rid = msg.request_id
        if run.episodes is None or rid not in run.episodes or msg.finish_reason == "abort":
            return ""
        req = run.core.request(rid)
        if (req.status, req.chunk_seq, req.instance) != ("running", msg.chunk_seq, msg.instance):
            return ""  # stale: the core drops it
        n = len(msg.token_ids)
        turn_full = bool(req.turn_limit) and req.turn_generated + n >= req.turn_limit
        budget_full = req.generated + n >= req.max_new_tokens
        return run.episodes.turn_end(
            rid, msg.finish_reason, n, turn_full=turn_full, budget_full=budget_full
        )

    async def _request_done(self, run: ActiveRollout, request_id: str, finish_reason: str) -> bool:
        """Request `request_id` is complete: tell the estimator (and the draft store when
        its group is done), stream it when the rollout streams; False when that failed
        (the rollout is abandoned)."""
        spec = run.book.specs[request_id]
        output_len = len(run.book.tokens[request_id])
        done = RequestFinished(
            rollout_id=run.rollout_id,
            group_id=spec.group_id,
            request_id=spec.request_id,
            output_len=output_len,
        )
        self.offer("estimator", 0, done)
        self._group_progress(run, spec.group_id)
        if run.stream is not None:
            rid = request_id
            versions = tuple(c.weight_version for c in run.book.chunks[rid])
            try:
                await run.stream.add(
                    spec, run.book.tokens[rid], run.book.logprobs[rid], versions,
                    finish_reason, last=run.core.is_done,  # then: flush, at once
                )  # fmt: skip
            except Exception as exc:  # e.g. a rank is gone: say which, stop here
                await self._abandon(run, f"direct dispatch failed: {exc}")
                return False
        return True

    def _group_progress(self, run: ActiveRollout, group_id: str) -> None:
        """The draft store frees a group's tree once all of its samples are done."""
        run.unfinished[group_id] -= 1
        if run.unfinished[group_id] == 0 and self.has_peer("drafts"):
            closed = GroupsClosed(rollout_id=run.rollout_id, group_ids=(group_id,))
            self.offer("drafts", 0, closed)

    def _open_episodes(self, requests: tuple[RequestSpec, ...], streamed: bool) -> Episodes | None:
        """The book of a rollout's episodes (None: it has none); `ValueError` when they
        cannot run here."""
        if not any(r.episode is not None for r in requests):
            return None
        if not self.num_peers("environment"):
            raise ValueError(
                "the rollout has multi-turn episodes but the topology has no 'environment' actor"
            )
        if streamed:
            raise ValueError("multi-turn episodes cannot be streamed to trainer ranks (yet)")
        for r in requests:
            ep = r.episode
            if ep is not None and (ep.max_turns < 1 or ep.max_observation_tokens < 0):
                raise ValueError(f"request {r.request_id!r}: bad episode budgets {ep}")
        timeout = self.opts.environment_timeout_s
        return Episodes(requests, self.num_peers("environment"), timeout, self.env_down)

    async def _reset_episodes(self, run: ActiveRollout) -> None:
        """Hold every episode and reset its environment (before any chunk is sent)."""
        if run.episodes is None:
            return
        for rid in run.episodes.episodes:
            run.core.hold(rid)
        for rid, e in list(run.episodes.episodes.items()):
            ep = e.spec.episode
            assert ep is not None
            msg = EnvironmentReset(
                rollout_id=run.rollout_id,
                request_id=rid,
                environment=ep.environment,
                prompt_ids=e.spec.prompt_ids,
                info={**e.spec.env_info, "sample_index": e.spec.index},
                max_observation_tokens=ep.max_observation_tokens,
                observation_cut=ep.observation_cut,
            )
            run.episodes.wait(rid, time.time() - run.book.start)
            await self._ask_environment(run, rid, msg, run.episodes.place(rid))
            if self.current is not run:
                return

    async def _turn_ended(self, run: ActiveRollout, request_id: str) -> bool:
        """The request's turn ended (its chunk committed, it is waiting): hold it and send
        its action to its environment; False when the rollout is over (it was the last)."""
        assert run.episodes is not None
        run.core.hold(request_id)
        action = run.episodes.action(request_id, run.book.tokens[request_id])
        turn = run.episodes.wait(request_id, time.time() - run.book.start)
        msg = EnvironmentStep(
            rollout_id=run.rollout_id, request_id=request_id, turn=turn, action_ids=action
        )
        env = run.episodes.env_of(request_id)
        await self._ask_environment(run, request_id, msg, env)
        return self.current is run

    async def _ask_environment(
        self,
        run: ActiveRollout,
        request_id: str,
        msg: EnvironmentReset | EnvironmentStep,
        env: int | None,
    ) -> None:
        """Send `msg` (its answer is awaited already) to environment actor `env`; none (no
        live actor, or the episode's was lost): the episode ends "env_lost"."""
        assert run.episodes is not None
        if env is None:
            run.episodes.lose(request_id, "env_lost")
            await self._end_held(run, request_id)
            return
        try:
            await self.send_to("environment", env, msg)
        except TransportError as exc:
            self.log.error("environment_undeliverable", instance=env, error=str(exc))
            await self._lose_environment(run, env)

    async def handle_environment_result(self, msg: EnvironmentResult) -> None:
        run = self.current
        if run is None or run.rollout_id != msg.rollout_id or run.episodes is None:
            self.num_unknown_results += 1
            self.log.warning("environment_result_unknown", request=msg.request_id)
            return
        rid = msg.request_id
        if rid not in run.episodes:
            self.num_unknown_results += 1
            return
        left = run.core.request(rid).remaining
        verdict = run.episodes.on_result(msg, left)
        if verdict == "stale":
            self.log.warning("environment_result_stale", request=rid, turn=msg.turn)
            return
        if verdict == "end":
            await self._end_held(run, rid)
            return
        ids = tuple(msg.observation_ids)
        run.book.observe(rid, ids)
        run.episodes.observed(rid, len(ids), len(run.book.tokens[rid]))
        run.core.resume(rid, len(ids), time.time() - run.book.start)
        await self._send_chunks()

    async def _end_held(self, run: ActiveRollout, request_id: str) -> None:
        """A held episode ended at its environment: the request is complete."""
        assert run.episodes is not None
        reason = run.episodes.ended(request_id)
        self._close_episode(run, request_id, reason)
        run.core.finish_held(request_id)
        run.book.finish(request_id, "stop", time.time() - run.book.start)
        if not await self._request_done(run, request_id, "stop"):
            return
        if run.core.is_done:
            await self._finish(run)
        else:
            await self._send_chunks()

    def _close_episode(self, run: ActiveRollout, request_id: str, reason: EpisodeEnd) -> None:
        """Close an ended episode's environment (its actor closed it itself on a failure)."""
        assert run.episodes is not None
        env = run.episodes.env_of(request_id)
        if env is not None and reason not in ("env_error", "env_timeout", "bad_observation"):
            close = EnvironmentClose(rollout_id=run.rollout_id, request_ids=(request_id,))
            self.offer("environment", env, close)

    def _close_all_episodes(self, run: ActiveRollout) -> None:
        """The rollout ended (finished, cancelled, failed): close what is left open."""
        if run.episodes is None:
            return
        for env in range(run.episodes.num_envs):
            if env not in run.episodes.down:
                self.offer("environment", env, EnvironmentClose(rollout_id=run.rollout_id))

    async def _lose_environment(self, run: ActiveRollout, env: int) -> None:
        """Environment actor `env` is lost: the episodes awaiting it end "env_lost"."""
        assert run.episodes is not None
        if env in run.episodes.down:
            return
        ids = run.episodes.lose_env(env)
        self.log.error("environment_lost", instance=env, episodes=len(ids))
        for rid in ids:
            run.episodes.lose(rid, "env_lost")
            if self.current is run:
                await self._end_held(run, rid)

    async def on_environment_lost(self, index: int) -> None:
        """A launcher reported environment actor `index` lost (`PeerLost`)."""
        run = self.current
        if run is not None and run.episodes is not None:
            await self._lose_environment(run, index)

    async def _watch_environments(self) -> None:
        """An environment actor whose answer is overdue is lost (no episode waits forever)."""
        while True:
            await anyio.sleep(self.opts.health_interval_s)
            run = self.current
            if run is None or run.episodes is None:
                continue
            for env in run.episodes.overdue(time.time() - run.book.start):
                if self.current is run:
                    await self._lose_environment(run, env)

    def _add_totals(self, run: ActiveRollout) -> None:
        """A rollout ended: its counters join the totals."""
        counts = dict(run.core.counters)
        if run.episodes is not None:
            counts.update(run.episodes.counts)
        for k, v in counts.items():
            self.totals[k] = self.totals.get(k, 0.0) + v

    def episode_counters(self) -> dict[str, float]:
        run = self.current
        if run is None or run.episodes is None:
            return {}
        return {k: float(v) for k, v in run.episodes.counts.items()}
