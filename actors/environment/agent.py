"""An agent function as a multi-turn task: the agent drives the loop and calls `generate`
itself, and the episode is still one request, scheduled the Seer way, with one trajectory.

    async def agent(turns: AgentTurns, prompt_ids, info) -> float:
        action = await turns.generate()               # the model's first turn
        for _ in range(3):
            if done_with(action):
                break
            action = await turns.generate(tool(action))  # append an observation; next turn
        return score(action)                           # the episode's reward

    def make_env():                           # EpisodeSpec.environment = "pkg.mod:make_env"
        return agent_environment(agent)

`agent_environment(agent)` turns the function into an `Environment`: `reset` starts the agent
(in the environment actor, as a task of its own) and returns the observation of its first
`generate` call; each `step` hands the model's action to the waiting `generate` and returns
the agent's next observation, or, when the agent returns, its reward with `done`. The
observation is token ids, or text when `encode` is given. `generate` appends only: the
trajectory is the prompt, then observations and actions in the order the agent asked for
them, and the model's tokens come back as ids, never re-tokenised.

What an agent function cannot do (the trajectory is one request of the rollout): change the
sampling between turns, edit or drop earlier context, branch (several generations of one
turn), or generate for another prompt. An agent that returns before its first `generate`
fails its episode (`env_error`: an episode has at least one turn); one that raises fails it
the same way; the episode's budgets (`max_turns`, token budget) still apply, and an episode
they end closes the environment, which cancels the agent (its reward is then what the
steps gave: 0). The step timeout covers the agent's work between two `generate` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from actors.environment.api import Observation, StepResult

AgentFunction: TypeAlias = Callable[
    ["AgentTurns", tuple[int, ...], Mapping[str, Any]], Awaitable[float]
]


class AgentError(RuntimeError):
    """An agent function broke the contract (it returned before its first `generate`, or
    called `generate` again before the last call returned)."""


class AgentTurns:
    """What an agent function calls: `generate(observation)` appends the observation and
    returns the model's next action (token ids)."""

    def __init__(self) -> None:
        self._events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._actions: asyncio.Queue[tuple[int, ...]] = asyncio.Queue()
        self._waiting = False
        self.num_turns = 0

    async def generate(self, observation: Observation = ()) -> tuple[int, ...]:
        """Append `observation` (token ids, or text with the environment's `encode`) to the
        context and return the model's next turn (its action tokens, stop token included)."""
        if self._waiting:
            raise AgentError("generate() called again before the last call returned")
        self._waiting = True
        try:
            await self._events.put(("turn", observation))
            action = await self._actions.get()
        finally:
            self._waiting = False
        self.num_turns += 1
        return action


class AgentEnvironment:
    """An agent function as an `Environment` (see the module)."""

    def __init__(
        self, agent: AgentFunction, encode: Callable[[str], Sequence[int]] | None = None
    ) -> None:
        self.agent = agent
        self.turns = AgentTurns()
        self._task: asyncio.Task[None] | None = None
        if encode is not None:
            self.encode = encode

    async def reset(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> Observation:
        self._task = asyncio.get_running_loop().create_task(self._run(prompt_ids, info))
        kind, value = await self.turns._events.get()
        if kind == "done":
            raise AgentError("the agent returned before its first generate(): no turn")
        if kind == "error":
            raise value
        return value  # type: ignore[no-any-return]

    async def step(self, action_ids: tuple[int, ...]) -> StepResult:
        if self._task is None:
            raise AgentError("step() before reset()")
        await self.turns._actions.put(tuple(action_ids))
        kind, value = await self.turns._events.get()
        if kind == "error":
            raise value
        if kind == "done":
            return StepResult(reward=value, done=True)
        return StepResult(observation=value)

    async def close(self) -> None:
        """Cancel the agent if it still runs (its episode ended before it returned)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> None:
        try:
            reward = await self.agent(self.turns, tuple(prompt_ids), info)
            if isinstance(reward, bool) or not isinstance(reward, int | float):
                raise AgentError(f"the agent returned a {type(reward).__name__}, not a reward")
            await self.turns._events.put(("done", float(reward)))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the episode's step raises it: env_error
            await self.turns._events.put(("error", exc))


def agent_environment(
    agent: AgentFunction, encode: Callable[[str], Sequence[int]] | None = None
) -> AgentEnvironment:
    """An environment that runs `agent` (a factory returns one per episode; `encode`: turns
    text observations into token ids)."""
    return AgentEnvironment(agent, encode)
