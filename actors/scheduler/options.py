"""SchedulerOptions: the rollout scheduler's policy and limits.

The number of generators is not an option: it is the topology's count of "generator"
actors, which the scheduler reads from its context.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.options import check, check_choice, check_positive
from actors.scheduler.policy import LONG_BAND, POLICY_NAMES, PROBE_FIRST, PROBE_FIRST_RULES


@dataclass(frozen=True, kw_only=True)
class SchedulerOptions:
    """`policy`: the default scheduling policy, one of `POLICY_NAMES` (a rollout may name
    another). `chunk_size`: tokens per chunk for the chunked policies.
    `max_running_per_instance`: requests in flight per generator. `kv_high_watermark`: the
    fraction of a generator's KV the requests it holds may fill. `affinity_spread`: how
    much busier the instance holding a request's KV may be before the request moves.
    `starvation_s`: context-aware's anti-starvation age, for requests that have run a
    chunk. `starvation_every`: at most one starved request promoted per this many
    dispatches. `long_band`: context-aware ranks the groups whose length estimate is at
    least the generation limit / `long_band` together, served among themselves in FIFO
    order (divided's), and the rest longest estimate first (1.0 = Seer's strict
    longest-first; `ContextAware`; the default, `LONG_BAND`, was measured in the simulator).
    `probe_first`: when context-aware serves a group's probe ahead of everyone: "always"
    (Seer's), "unknown" (only while its group has no length estimate: no prior, no
    finished sibling), "never" (ranked by its group's estimate like its siblings).
    `health_interval_s`: how often generators with work are asked for their
    load (during a rollout lost generators are probed at the same pace: one that answers
    with the current weights is back; one with older weights gets them from the trainer
    first). `health_timeout_s`: how long a generator may take to answer before it counts
    as lost (engine steps run off the generator's event loop, so a busy one still
    answers). `republish_timeout_s`: how long the call to the trainer that pushes a
    returning generator the current weights may take. `growth_reserve`: KV tokens of
    growth set aside per request an instance holds when admitting another (None = a
    quarter of `chunk_size`). `scorer`: import path ("package.module:function") of a
    factory that takes a task name and returns its reward function, for rollouts streamed
    straight to the trainer ranks (`StreamToRanks`); "" = this scheduler does not score.
    `chunk_deadline_floor_s`, `chunk_deadline_slack`: a chunk whose result has not come
    `max(floor, slack * its token budget * its generator's measured seconds per token)`
    after its dispatch is re-queued from its committed progress (a result lost on the
    wire). `max_instance_faults`: a generator whose chunks fail this many times in a row
    (aborted, refused for an engine fault, overdue) counts as lost for the rest of the
    rollout unless the trainer pushes it the weights again. `max_chunk_faults`: a sample
    whose chunks failed that often in a row ends in "error" rather than be tried again.
    `environment_timeout_s`: how long an environment actor may take to answer a multi-turn
    episode's reset or step before it counts as lost (the episodes awaiting it end
    "env_lost"); keep it above the environment actors' `step_timeout_s`.
    `result_message_bytes`: a rollout's results go to the driver in messages of at most
    this many bytes each (`RolloutPart`s, then `RolloutFinished`; 4 bytes a token and a
    logprob, a fixed cost a sample and a chunk record; a larger sample travels alone).
    `sticky_turns`: an episode's next turn goes back to the generator holding its KV (Seer
    across turns); False places every turn as a fresh request (least-loaded, no pin, no KV
    home), as an agent loop over a plain server submits it: the baseline of `seer bench
    agentic`."""

    policy: str = "context_aware"
    chunk_size: int = 128
    max_running_per_instance: int = 32
    kv_high_watermark: float = 0.9
    affinity_spread: int = 4
    starvation_s: float = 60.0
    starvation_every: int = 8
    long_band: float = LONG_BAND
    probe_first: str = PROBE_FIRST
    health_interval_s: float = 1.0
    health_timeout_s: float = 3.0
    republish_timeout_s: float = 300.0
    growth_reserve: int | None = None
    scorer: str = ""
    chunk_deadline_floor_s: float = 120.0
    chunk_deadline_slack: float = 4.0
    max_instance_faults: int = 3
    max_chunk_faults: int = 3
    environment_timeout_s: float = 60.0
    result_message_bytes: int = 16 << 20
    sticky_turns: bool = True

    def __post_init__(self) -> None:
        check_choice(self, "policy", POLICY_NAMES)
        check_choice(self, "probe_first", PROBE_FIRST_RULES)
        check_positive(
            self,
            "chunk_size",
            "max_running_per_instance",
            "starvation_s",
            "starvation_every",
            "health_interval_s",
            "health_timeout_s",
            "republish_timeout_s",
            "chunk_deadline_floor_s",
            "chunk_deadline_slack",
            "max_instance_faults",
            "max_chunk_faults",
            "result_message_bytes",
        )
        band = self.long_band
        check(band >= 1.0, "SchedulerOptions.long_band", ">= 1", band)
        hw = self.kv_high_watermark
        check(0 < hw <= 1, "SchedulerOptions.kv_high_watermark", "in (0, 1]", hw)
        check(
            self.affinity_spread >= 0,
            "SchedulerOptions.affinity_spread",
            ">= 0",
            self.affinity_spread,
        )
        reserve = self.growth_reserve
        check(reserve is None or reserve >= 0, "SchedulerOptions.growth_reserve", ">= 0", reserve)
