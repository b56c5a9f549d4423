"""EnvironmentActor: runs multi-turn episodes' environments, off the scheduler's loop.

Consumes `EnvironmentReset` (build the episode's environment from its factory's import path
and reset it), `EnvironmentStep` (step it with a turn's action tokens) and
`EnvironmentClose` (episodes that ended or were abandoned: close their environments).
Emits one `EnvironmentResult` to the scheduler per reset and step: the observation as
token ids (cut to the episode's budget, side as asked), the step's reward and done.

Each reset and step runs in its own task, at most `max_concurrency` at once, each within
`step_timeout_s`. An environment that raises, times out or returns something that is not
token ids or text ends its episode: the result carries the failure ("env_error",
"env_timeout", "bad_observation") and the message, its environment is closed, and the
actor keeps serving (a failing environment never kills it). Environments live here for
their episode's life; a reset of a new rollout closes any an older rollout left open. It
does not keep budgets or rewards across turns: the scheduler does (`actors.scheduler.episodes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from actors.base import Actor, ActorContext, Handler
from actors.environment.api import EnvironmentFactory, load_factory, resolve
from actors.environment.core import (
    BadObservation,
    Episode,
    EpisodeTable,
    cut,
    observation_ids,
    step_result,
)
from actors.environment.options import EnvironmentOptions
from transport.errors import TransportError
from transport.messages import (
    EnvironmentClose,
    EnvironmentReset,
    EnvironmentResult,
    EnvironmentStep,
    Message,
)

COUNTER_NAMES = ("resets", "steps", "env_error", "env_timeout", "bad_observation", "closed")


class EnvironmentActor(Actor):
    role = "environment"
    Options = EnvironmentOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: EnvironmentOptions = ctx.options or EnvironmentOptions()
        self.table = EpisodeTable()
        self.factories: dict[str, EnvironmentFactory] = {}
        self.limit = anyio.Semaphore(self.opts.max_concurrency)
        self.counts: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            EnvironmentReset: self.handle_environment_reset,
            EnvironmentStep: self.handle_environment_step,
            EnvironmentClose: self.handle_environment_close,
        }

    def counters(self) -> dict[str, float]:
        return {**{k: float(v) for k, v in self.counts.items()}, "open": len(self.table.episodes)}

    async def handle_environment_reset(self, msg: EnvironmentReset) -> None:
        self.start_soon(self._reset, msg)

    async def handle_environment_step(self, msg: EnvironmentStep) -> None:
        self.start_soon(self._step, msg)

    async def handle_environment_close(self, msg: EnvironmentClose) -> None:
        for episode in self.table.pop(msg.rollout_id, msg.request_ids):
            self.start_soon(self._close, episode.env)

    async def _reset(self, msg: EnvironmentReset) -> None:
        self.counts["resets"] += 1
        rid = msg.request_id
        try:
            factory = self.factories.get(msg.environment) or load_factory(msg.environment)
            self.factories[msg.environment] = factory
            env = factory()
        except Exception as exc:  # a bad factory fails its episode, never the actor
            await self._fail(msg.rollout_id, rid, 0, "env_error", f"cannot build: {exc!r}")
            return
        episode = Episode(msg.rollout_id, env, msg.max_observation_tokens, msg.observation_cut)
        for old in self.table.open(rid, episode):
            self.start_soon(self._close, old.env)
        await self._run(episode, msg.rollout_id, rid, 0, env.reset, tuple(msg.prompt_ids), msg.info)

    async def _step(self, msg: EnvironmentStep) -> None:
        self.counts["steps"] += 1
        episode = self.table.get(msg.rollout_id, msg.request_id)
        if episode is None or episode.busy:
            why = "is not open here" if episode is None else "is still busy with its last turn"
            error = f"episode {msg.request_id!r} {why}"
            await self._fail(msg.rollout_id, msg.request_id, msg.turn, "env_error", error)
            return
        action = tuple(msg.action_ids)
        await self._run(episode, msg.rollout_id, msg.request_id, msg.turn, episode.env.step, action)

    async def _run(
        self, episode: Episode, rollout_id: str, rid: str, turn: int, fn: Any, *args: Any
    ) -> None:
        """Call `fn(*args)` (reset: turn 0, else step) and send its result."""
        episode.busy = True
        try:
            async with self.limit:
                with anyio.fail_after(self.opts.step_timeout_s):
                    value = await resolve(fn(*args))
            if turn == 0:
                value = (value, 0.0, False)
            step = step_result(value, rid)
            ids = () if step.done else observation_ids(step.observation, episode.env, rid)
        except TimeoutError:
            limit = self.opts.step_timeout_s
            await self._drop(episode, rollout_id, rid, turn, "env_timeout", f"over {limit:g} s")
            return
        except BadObservation as exc:
            await self._drop(episode, rollout_id, rid, turn, "bad_observation", str(exc))
            return
        except Exception as exc:  # the environment's own failure: its episode ends
            await self._drop(episode, rollout_id, rid, turn, "env_error", repr(exc))
            return
        finally:
            episode.busy = False
        ids, num_cut = cut(ids, episode.max_observation_tokens, episode.side)
        result = EnvironmentResult(
            rollout_id=rollout_id,
            request_id=rid,
            turn=turn,
            instance=self.ctx.index,
            observation_ids=ids,
            reward=step.reward,
            done=step.done,
            num_cut_tokens=num_cut,
        )
        await self._send(result)

    async def _drop(
        self, episode: Episode, rollout_id: str, rid: str, turn: int, failure: str, error: str
    ) -> None:
        if self.table.get(rollout_id, rid) is episode:
            self.table.pop(rollout_id, (rid,))
            self.start_soon(self._close, episode.env)
        await self._fail(rollout_id, rid, turn, failure, error)

    async def _fail(self, rollout_id: str, rid: str, turn: int, failure: str, error: str) -> None:
        self.counts[failure] += 1
        self.log.warning("episode_failed", request=rid, turn=turn, failure=failure, error=error)
        result = EnvironmentResult(
            rollout_id=rollout_id,
            request_id=rid,
            turn=turn,
            instance=self.ctx.index,
            failure=failure,  # type: ignore[arg-type]
            error=error,
        )
        await self._send(result)

    async def _send(self, result: EnvironmentResult) -> None:
        try:
            await self.send_to("scheduler", 0, result)
        except TransportError as exc:  # no scheduler, no rollout: keep serving regardless
            self.log.error(
                "environment_result_undeliverable", request=result.request_id, error=str(exc)
            )

    async def _close(self, env: Any) -> None:
        close = getattr(env, "close", None)
        if not callable(close):
            return
        self.counts["closed"] += 1
        try:
            with anyio.fail_after(self.opts.close_timeout_s):
                await resolve(close())
        except Exception as exc:  # closing is best effort: logged, never fatal
            self.log.warning("environment_close_failed", error=repr(exc))
