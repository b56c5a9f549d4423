"""Multi-turn replay: episodes whose turns are separated by their environment's latency.

``simulate_turns`` runs the simulator's event loop (``pipeline.sim.simulator.events``) on
episodes (``EpisodeTrace`` per request: each turn's action tokens, and between turns the
observation tokens and the environment's latency), as the live scheduler runs them
(docs/multiturn.md): a turn's last chunk ends, the scheduler core holds the request
(``SchedulerCore.hold``), an environment event fires ``latency_s`` later and the core
resumes it with the observation tokens in its context (``resume``), back into the policy's
order. The KV stays parked on the instance that ran the turn (``kv_pool="local"``): a
turn that comes back there prefills only its observation; one that moves (or whose parked
KV was evicted) re-prefills its whole context. ``sticky_turns=False`` places every turn
as a fresh request (the agentic baseline). The episode's length (actions and
observations) is its request's ``output_len``; the oracle ranks by it, the estimator
learns it, as live. Re-prefill here excludes the observation tokens (prefilled once
wherever the turn runs, as live does not count them either). The last turn ends the
episode (no environment step after it). Deterministic: the same inputs give the same
record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.scheduler import Policy, SchedulerCore
from pipeline.sim.acceptance import AcceptanceTable
from pipeline.sim.costmodel import CostModel
from pipeline.sim.instance import Chunk, SimInstance
from pipeline.sim.simulator.config import SimConfig, SimRequest, SimResult
from pipeline.sim.simulator.events import _Run

__all__ = ["EpisodeTrace", "simulate_turns"]

_ENV = 3  # event kind: an environment answers (after _END, _RESULT, _ARRIVE)


@dataclass(frozen=True, slots=True)
class EpisodeTrace:
    """One episode's turns: ``actions[k]`` tokens the model makes in turn k; between turn
    k and k + 1 its environment takes ``latencies_s[k]`` and answers ``observations[k]``
    tokens (so both have one entry fewer than ``actions``)."""

    actions: tuple[int, ...]
    observations: tuple[int, ...]
    latencies_s: tuple[float, ...]

    def __post_init__(self) -> None:
        n = len(self.actions)
        if n < 1 or any(a < 1 for a in self.actions):
            raise ValueError(f"EpisodeTrace.actions: one or more turns of >= 1 token, got {n}")
        if len(self.observations) != n - 1 or len(self.latencies_s) != n - 1:
            raise ValueError(
                f"EpisodeTrace: {n} turns need {n - 1} observations and latencies, got "
                f"{len(self.observations)} and {len(self.latencies_s)}"
            )
        if any(o < 0 for o in self.observations) or any(t < 0 for t in self.latencies_s):
            raise ValueError("EpisodeTrace: observations and latencies must be >= 0")

    @property
    def length(self) -> int:
        """The episode's tokens after its prompt: actions and observations."""
        return sum(self.actions) + sum(self.observations)


class _TurnRun(_Run):
    """The event loop with environment events between an episode's turns."""

    def __init__(
        self,
        requests: Sequence[SimRequest],
        episodes: Mapping[str, EpisodeTrace],
        policy_name: str,
        config: SimConfig,
        cost: CostModel,
        acceptance: AcceptanceTable | None,
        sticky_turns: bool,
    ) -> None:
        self.sticky_turns = sticky_turns
        super().__init__(requests, policy_name, config, cost, acceptance)
        self.episodes: list[EpisodeTrace] = []
        for spec, state in zip(self.reqs, self.states, strict=True):
            ep = episodes.get(spec.request_id)
            if ep is None:
                raise ValueError(f"simulate_turns: no EpisodeTrace for {spec.request_id!r}")
            if ep.length != spec.output_len:
                raise ValueError(
                    f"simulate_turns: {spec.request_id!r} has output_len {spec.output_len}, "
                    f"its episode {ep.length} tokens"
                )
            self.episodes.append(ep)
            state.turn_limit = ep.actions[0]
        self.turn = [0] * len(self.reqs)
        self.observation_tokens = 0  # observation tokens prefilled on resumed turns
        self.env_wait_s = 0.0

    def _make_core(self, policy: Policy | None, policy_name: str, limit: int) -> SchedulerCore:
        core = super()._make_core(policy, policy_name, limit)
        core.sticky_turns = self.sticky_turns
        return core

    def _chunk_ended(self, inst: SimInstance, c: Chunk, now: float) -> None:
        super()._chunk_ended(inst, c, now)
        r = c.request
        st, ep, k = self.states[r], self.episodes[r], self.turn[r]
        if st.status != "waiting" or k + 1 >= len(ep.actions):
            return
        if st.generated < sum(ep.actions[: k + 1]) + sum(ep.observations[:k]):
            return  # the turn goes on (its next chunk)
        self.core.hold(st.request_id)
        self._event(now + ep.latencies_s[k], _ENV, inst.index, r)
        self.env_wait_s += ep.latencies_s[k]

    def _handle(self, now: float, kind: int, i: int, payload: Any) -> None:
        if kind != _ENV:
            super()._handle(now, kind, i, payload)
            return
        r = payload
        st, ep = self.states[r], self.episodes[r]
        k = self.turn[r]
        self.turn[r] = k + 1
        st.turn_limit = ep.actions[k + 1]
        self.core.resume(st.request_id, ep.observations[k], now)
        self.observation_tokens += ep.observations[k]
        self._dispatch(now)


def simulate_turns(
    requests: Sequence[SimRequest],
    episodes: Mapping[str, EpisodeTrace],
    policy: str,
    config: SimConfig,
    cost: CostModel,
    *,
    sticky_turns: bool = True,
    acceptance: AcceptanceTable | None = None,
) -> SimResult:
    """One simulated rollout of multi-turn ``requests`` (``episodes`` by request id) under
    ``policy``. ``SimResult.extra`` adds ``reprefill_tokens`` (re-prefill without the
    observations), ``observation_tokens`` and ``env_wait_s`` (environment time summed
    over turns)."""
    if config.kv_pool != "local":
        raise ValueError("simulate_turns: episodes park their KV on an instance (kv_pool 'local')")
    run = _TurnRun(requests, episodes, policy, config, cost, acceptance, sticky_turns)
    result = run.run(policy)
    prefilled = sum(inst.counts["num_reprefilled_tokens"] for inst in run.instances)
    result.extra |= {
        "reprefill_tokens": max(0, prefilled - run.observation_tokens),
        "observation_tokens": run.observation_tokens,
        "env_wait_s": run.env_wait_s,
    }
    return result
