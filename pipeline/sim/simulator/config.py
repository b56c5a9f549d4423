"""What a simulated rollout takes and gives: ``SimRequest``, ``SimConfig``, ``SimResult``.

``SimRequest`` carries a request's true output length (seen only by the simulated engine
and the oracle) and, from a live trace, its recorded output. ``SimConfig`` holds the
cluster's and the scheduler's knobs and checks them once. ``SimResult`` is the rollout's
record plus the counters the validation reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from actors.generator.builtin.config import PARKED_EVICTIONS
from actors.scheduler.policy import PROBE_FIRST_RULES
from pipeline.sim.instance import KvPool
from transport.messages import RolloutRecord

__all__ = ["SimConfig", "SimRequest", "SimResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRequest:
    request_id: str
    group_id: str
    prompt_id: str
    is_probe: bool
    prompt_len: int
    output_len: int  # the true length (engine and oracle only)
    max_new_tokens: int
    # the recorded output (a live trace's): grouped drafts then replay on it
    token_ids: tuple[int, ...] = ()
    # the prompt's last PROMPT_TAIL_TOKENS tokens: live, every sibling's sequence in the
    # group's suffix tree starts with them, and a draft's match starts in them
    prompt_tail: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """Cluster and scheduler knobs. ``max_running_per_instance`` defaults to ``max_batch``;
    ``spec``: "off" or "group" (grouped speculation, MBA budget); ``max_steps``: the
    longest stretch of decode steps priced at once."""

    num_instances: int
    max_batch: int
    kv_capacity: int
    chunk_size: int
    max_running_per_instance: int | None = None
    kv_high_watermark: float = 0.9
    affinity_spread: int = 4
    growth_reserve: int | None = None
    starvation_s: float = 60.0
    starvation_every: int = 8
    # context-aware's long band (``ContextAware``; 1.0 = Seer's strict longest-first)
    long_band: float = 1.0
    # when context-aware serves a probe ahead of everyone (``ContextAware``; "always": Seer's)
    probe_first: str = "always"
    kv_pool: KvPool = "local"
    spec: Literal["off", "group"] = "off"
    g_max: int = 8
    max_steps: int = 256
    # prefill tokens an instance runs per step (the engine's chunked prefill); None: a
    # whole prefill in one step
    max_prefill_tokens: int | None = None
    seed: int = 0
    dispatch_latency_s: float = 0.0  # scheduler decision -> the chunk reaches its engine
    result_latency_s: float = 0.0  # a chunk ends -> the scheduler has its result
    start_latency_s: float = 0.0  # the rollout's clock starts -> its first dispatch
    step_overhead_s: float = 0.0  # a generator's time between engine steps, per step
    report_s: float = 0.0  # a generator's time reporting one ended chunk
    # per instance, its steps' cost over the table's (a diagnostic replay: `seer sim
    # validate`'s speed-normalized makespan); empty = every instance at the table's price
    instance_speed: tuple[float, ...] = ()
    # per instance, (from s, factor) entries in time order: its engine steps planned from
    # that time on cost the factor times the table's price (on top of ``instance_speed``;
    # 1.0 before the first entry): the machine's speed as it varied through a live rollout
    # (`seer sim validate`'s paced diagnostic); empty = constant
    instance_pace: tuple[tuple[tuple[float, float], ...], ...] = ()
    # which parked KV an instance evicts first (the built-in engine's
    # ``EngineConfig.parked_eviction``: "queue" or "lru")
    parked_eviction: str = "queue"
    # per instance, the T(B, g) its speculation policy prices drafts by, as (B, g, seconds)
    # rows: what a live generator's policy read (its engine's start-up measurement,
    # recorded in the step log); empty = the table's T(B, g) at the workload's mean context
    spec_step_times: tuple[tuple[tuple[int, int, float], ...], ...] = ()
    # per instance, the decode batch sizes of the engine steps its live generator took
    # before this rollout with nothing to draft (the topology's warm-up rollout): fresh
    # replayed speculation policies count them (``can_pay``, once a step, as live), which
    # sets when the first exploration falls due; ignored when ``spec_state`` is given
    spec_prelude: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        self._check_ranges()
        self._check_per_instance()
        if self.parked_eviction not in PARKED_EVICTIONS:
            raise ValueError(
                f"SimConfig.parked_eviction must be one of {PARKED_EVICTIONS}, "
                f"got {self.parked_eviction!r}"
            )
        if self.probe_first not in PROBE_FIRST_RULES:
            raise ValueError(
                f"SimConfig.probe_first must be one of {PROBE_FIRST_RULES}, "
                f"got {self.probe_first!r}"
            )
        if self.spec not in ("off", "group"):
            raise ValueError(f"SimConfig.spec must be 'off' or 'group', got {self.spec!r}")
        if self.kv_pool not in ("local", "global"):
            raise ValueError(f"SimConfig.kv_pool must be 'local' or 'global', got {self.kv_pool!r}")

    def _check_ranges(self) -> None:
        for name in (
            "dispatch_latency_s",
            "result_latency_s",
            "start_latency_s",
            "step_overhead_s",
            "report_s",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"SimConfig.{name} must be >= 0, got {getattr(self, name)}")
        if not self.long_band >= 1.0:
            raise ValueError(f"SimConfig.long_band must be >= 1, got {self.long_band}")
        for name in ("num_instances", "max_batch", "kv_capacity", "chunk_size", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"SimConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 1:
            raise ValueError(
                f"SimConfig.max_prefill_tokens must be >= 1 or None, got {self.max_prefill_tokens}"
            )

    def _check_per_instance(self) -> None:
        for name, what in (
            ("spec_step_times", "tables"),
            ("instance_pace", "paces"),
            ("spec_prelude", "step lists"),
        ):
            given = getattr(self, name)
            if given and len(given) != self.num_instances:
                raise ValueError(
                    f"SimConfig.{name} has {len(given)} {what} for {self.num_instances} instances"
                )


@dataclass(slots=True)
class SimResult:
    record: RolloutRecord
    counters: dict[str, int]  # the scheduler core's
    wall_s: float  # how long the simulation itself took
    cpu_s: float  # CPU time it took (on a shared machine the fairer figure)
    num_events: int
    extra: dict[str, Any] = field(default_factory=dict)
