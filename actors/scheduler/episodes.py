"""Episodes: the scheduler's book of a rollout's multi-turn episodes (pure, no sockets).

A multi-turn request is one trajectory: prompt, then per turn the model's action tokens and
the environment's observation tokens, all in the request's context (`RunBook.tokens`), so
that each turn is a continuation of the same request: it re-enters the scheduler's order,
sticky to the generator holding its KV, and the length estimator learns the episode's whole
length. This book keeps what only episodes have: per token the loss mask and the weight
version that sampled it; per turn where it ended, why, and the step's reward; which
environment actor holds the episode and the answer awaited from it (with its deadline);
the episode's reward and why it ended (`EpisodeEnd`). Budgets are computed from these
records: `max_turns` steps, `max_turn_tokens` per turn (the core caps chunks to the turn),
the sampling's `max_new_tokens` for the whole trajectory after the prompt (an observation
that would leave no room for another action ends the episode, "length").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from transport.messages import EnvironmentResult, EpisodeEnd, EpisodeResult, RequestSpec

TurnEnd = Literal["no", "step", "end"]
FAILURES: frozenset[str] = frozenset({"env_error", "env_timeout", "env_lost", "bad_observation"})


@dataclass(slots=True)
class Episode:
    spec: RequestSpec
    env: int | None = None  # the environment actor holding its environment
    turn: int = 0  # environment steps asked for
    turn_start: int = 0  # where the current turn's action starts in the request's tokens
    mask: list[int] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    num_cut: int = 0
    awaiting: tuple[int, float] | None = None  # (turn, deadline) of the answer awaited
    end: EpisodeEnd | None = None


class Episodes:
    """The multi-turn requests of one rollout, spread over `num_envs` environment actors."""

    def __init__(
        self,
        specs: Iterable[RequestSpec],
        num_envs: int,
        timeout_s: float,
        down: set[int] | None = None,
    ) -> None:
        self.episodes = {s.request_id: Episode(s) for s in specs if s.episode is not None}
        self.num_envs = num_envs
        self.timeout_s = timeout_s
        # environment actors lost (shared with the scheduler: it outlives the rollout)
        self.down: set[int] = set() if down is None else down
        self.num_open = [0] * num_envs  # episodes placed on each actor and not ended
        self.counts: dict[str, int] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.episodes

    def place(self, request_id: str) -> int | None:
        """The environment actor for a new episode: the live one with the fewest open
        episodes (None: none is live)."""
        live = [i for i in range(self.num_envs) if i not in self.down]
        if not live:
            return None
        best = min(live, key=lambda i: (self.num_open[i], i))
        self.episodes[request_id].env = best
        self.num_open[best] += 1
        return best

    def on_chunk(self, request_id: str, num_tokens: int, weight_version: int) -> None:
        e = self.episodes[request_id]
        e.mask.extend([1] * num_tokens)
        e.versions.extend([weight_version] * num_tokens)

    def turn_end(
        self,
        request_id: str,
        finish_reason: str,
        num_tokens: int,
        *,
        turn_full: bool,
        budget_full: bool,
    ) -> TurnEnd:
        """What the end of a chunk of `num_tokens` tokens (not yet `on_chunk`) means for
        the episode: "no" (the turn goes on), "step" (the turn ended: ask the environment),
        "end" (the episode ended here). `turn_full`: the turn's action budget is used up;
        `budget_full`: the episode's token budget is."""
        e = self.episodes[request_id]
        if finish_reason == "chunk" and not turn_full:
            return "no"
        reason = "turn_length" if finish_reason == "chunk" else finish_reason
        e.turn_ends.append(len(e.mask) + num_tokens)
        e.stop_reasons.append(reason)
        if reason in ("stop", "turn_length") and not budget_full:
            return "step"
        e.end = "error" if reason == "error" else "length"
        return "end"

    def action(self, request_id: str, tokens: Sequence[int]) -> tuple[int, ...]:
        """The current turn's action tokens; the next turn's will start after them."""
        e = self.episodes[request_id]
        action = tuple(tokens[e.turn_start :])
        e.turn += 1
        return action

    def wait(self, request_id: str, now: float) -> int:
        """An answer is awaited from the episode's environment for its current turn."""
        e = self.episodes[request_id]
        e.awaiting = (e.turn, now + self.timeout_s)
        return e.turn

    def on_result(self, msg: EnvironmentResult, num_left: int) -> TurnEnd | Literal["stale"]:
        """An environment's answer: "stale" (not the one awaited), "step" (append the
        observation, next turn; then call `observed`), "end". `num_left`: tokens of the
        episode's budget left."""
        e = self.episodes.get(msg.request_id)
        if e is None or e.awaiting is None or e.awaiting[0] != msg.turn or e.end is not None:
            self.counts["stale_env_results"] = self.counts.get("stale_env_results", 0) + 1
            return "stale"
        e.awaiting = None
        if msg.failure:
            e.end = msg.failure
            return "end"
        if msg.turn:
            e.step_rewards.append(msg.reward)
        max_turns = e.spec.episode.max_turns if e.spec.episode is not None else 0
        if msg.done:
            e.end = "done"
        elif msg.turn >= max_turns:
            e.end = "max_turns"
        elif len(msg.observation_ids) >= num_left:
            e.end = "length"
        else:
            e.num_cut += msg.num_cut_tokens
            return "step"
        return "end"

    def observed(self, request_id: str, num_tokens: int, context_len: int) -> None:
        """`num_tokens` observation tokens joined the context (now `context_len` tokens after
        the prompt): loss mask 0, no weight version; the next turn starts after them."""
        e = self.episodes[request_id]
        e.mask.extend([0] * num_tokens)
        e.versions.extend([-1] * num_tokens)
        e.turn_start = context_len

    def lose(self, request_id: str, reason: EpisodeEnd) -> None:
        self.episodes[request_id].end = reason

    def lose_env(self, env: int) -> list[str]:
        """Environment actor `env` is lost: the episodes awaiting it (they end "env_lost")."""
        self.down.add(env)
        ids = [
            rid for rid, e in self.episodes.items()
            if e.env == env and e.awaiting is not None and e.end is None
        ]  # fmt: skip
        for rid in ids:
            self.episodes[rid].awaiting = None
        return ids

    def overdue(self, now: float) -> list[int]:
        """Environment actors with an answer overdue."""
        return sorted({
            e.env for e in self.episodes.values()
            if e.awaiting is not None and e.awaiting[1] < now and e.env is not None
        })  # fmt: skip

    def env_of(self, request_id: str) -> int | None:
        """The episode's live environment actor (None: it has none, or lost it)."""
        env = self.episodes[request_id].env
        return None if env is None or env in self.down else env

    def ended(self, request_id: str) -> EpisodeEnd:
        """The episode ended (counted by its reason); the reason."""
        e = self.episodes[request_id]
        end = e.end or "error"
        if e.env is not None:
            self.num_open[e.env] -= 1
        key = f"episodes_{end}"
        self.counts[key] = self.counts.get(key, 0) + 1
        return end

    def result(self, request_id: str) -> EpisodeResult:
        e = self.episodes[request_id]
        end = e.end or "error"
        return EpisodeResult(
            loss_mask=tuple(e.mask),
            token_versions=tuple(e.versions),
            turn_ends=tuple(e.turn_ends),
            stop_reasons=tuple(e.stop_reasons),
            step_rewards=tuple(e.step_rewards),
            reward=0.0 if end in FAILURES else float(sum(e.step_rewards)),
            end_reason=end,
            num_cut_tokens=e.num_cut,
        )
