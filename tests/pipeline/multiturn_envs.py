"""A tiny multi-turn environment for the tests, driven by each prompt's `env_info`.

`reset` answers `first` twice; step t (1, 2, ...) rewards 0.25 and answers `obs_len` tokens
of value 60 + t (as text when `text` is set: "a" is token 60, ...), done at step `done_at`.
Faults on demand at step `fail_at`: `fail` "raise" raises, "sleep" sleeps `sleep_s` (past
the actor's step timeout), "bad" returns a dict, "huge" answers 500 tokens. `step_s`:
seconds every step takes (so a rollout lasts long enough to kill an actor in it).

`make_agent_env`: the agent-function form: the agent asks for `turns` generations (the
`agent` info: "early" returns before the first, "raise" raises after the first), appending
[70 + t] * t before turn t + 1, and returns the number of action tokens it saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from actors.environment import AgentEnvironment, AgentTurns, StepResult, agent_environment

CLOSED: list[str] = []  # (in the environment actor's process: for in-process tests)


class CounterEnv:
    def __init__(self) -> None:
        self.info: Mapping[str, Any] = {}
        self.turn = 0

    async def reset(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> list[int]:
        self.info = info
        return [int(info.get("first", 40))] * 2

    async def step(self, action_ids: tuple[int, ...]) -> StepResult:
        self.turn += 1
        info, t = self.info, self.turn
        await anyio.sleep(float(info.get("step_s", 0.0)))
        if t == info.get("fail_at"):
            fail = info.get("fail")
            if fail == "raise":
                raise RuntimeError("the tool crashed")
            if fail == "sleep":
                await anyio.sleep(float(info.get("sleep_s", 30.0)))
            if fail == "bad":
                return StepResult(observation={"not": "tokens"}, reward=1.0)  # type: ignore[arg-type]
            if fail == "huge":
                return StepResult(observation=[61] * 500, reward=0.25)
        obs_len = int(info.get("obs_len", 2))
        done = t == info.get("done_at")
        if info.get("text"):
            return StepResult(observation=chr(ord("a") + t) * obs_len, reward=0.25, done=done)
        return StepResult(observation=[60 + t] * obs_len, reward=0.25, done=done)

    def encode(self, text: str) -> list[int]:
        return [60 + ord(c) - ord("a") for c in text]

    async def close(self) -> None:
        CLOSED.append(str(self.info.get("first", "")))


def make_counter_env() -> CounterEnv:
    return CounterEnv()


async def counting_agent(
    turns: AgentTurns, prompt_ids: tuple[int, ...], info: Mapping[str, Any]
) -> float:
    if info.get("agent") == "early":
        return 1.0
    seen = list(await turns.generate())
    if info.get("agent") == "raise":
        raise RuntimeError("the agent crashed")
    for t in range(1, int(info.get("turns", 3))):
        seen += await turns.generate([70 + t] * t)
    return float(len(seen))


def make_agent_env() -> AgentEnvironment:
    return agent_environment(counting_agent)
