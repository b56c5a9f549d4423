"""The synthetic environment of `seer bench agentic`: turns, observations and latencies
drawn per sample (pipeline/sim/agentic.py) and handed to it in the prompt's `env_info`.

For sample i of a group, `env_info` holds `turns_i` (the episode's turns), `obs_i` (the
observation tokens after each turn but the last) and `lat_i` (the seconds each of those
steps takes); the scheduler adds `sample_index`. Step t (1, 2, ...) sleeps `lat_i[t-1]`
and answers `obs_i[t-1]` tokens; the step after the last turn answers done at once (the
episode's last action is its answer: no tool runs after it), reward 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from actors.environment import StepResult

__all__ = ["SyntheticEnv", "env_info", "make_env"]

OBSERVATION_TOKEN = 7  # every observation token (any id of the bench model's vocabulary)


def env_info(
    turns: list[int], observations: list[tuple[int, ...]], latencies: list[tuple[float, ...]]
) -> dict[str, Any]:
    """A prompt's `env_info` for its samples' drawn episodes (one entry per sample)."""
    info: dict[str, Any] = {}
    for i, (t, obs, lat) in enumerate(zip(turns, observations, latencies, strict=True)):
        if len(obs) != t - 1 or len(lat) != t - 1:
            raise ValueError(f"sample {i}: {t} turns need {t - 1} observations and latencies")
        info |= {f"turns_{i}": t, f"obs_{i}": tuple(obs), f"lat_{i}": tuple(float(x) for x in lat)}
    return info


class SyntheticEnv:
    """One episode of the drawn workload (see the module)."""

    def __init__(self) -> None:
        self.turns = 1
        self.obs: tuple[int, ...] = ()
        self.lat: tuple[float, ...] = ()
        self.step_no = 0

    async def reset(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> list[int]:
        i = info["sample_index"]
        if f"turns_{i}" not in info:
            raise ValueError(f"env_info has no episode for sample {i} (keys turns_{i}, ...)")
        self.turns, self.obs, self.lat = info[f"turns_{i}"], info[f"obs_{i}"], info[f"lat_{i}"]
        return []

    async def step(self, action_ids: tuple[int, ...]) -> StepResult:
        self.step_no += 1
        t = self.step_no
        if t >= self.turns:
            return StepResult(observation=[], reward=1.0, done=True)
        await anyio.sleep(self.lat[t - 1])
        return StepResult(observation=[OBSERVATION_TOKEN] * self.obs[t - 1], reward=0.0)


def make_env() -> SyntheticEnv:
    return SyntheticEnv()
