"""ActiveRollout: what the scheduler actor holds for the rollout it is running."""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.dispatcher.stream import SampleStream
from actors.scheduler.core import SchedulerCore
from actors.scheduler.episodes import Episodes
from actors.scheduler.runbook import RunBook


@dataclass
class ActiveRollout:
    rollout_id: str
    core: SchedulerCore
    book: RunBook
    policy: str
    dispatched: dict[tuple[str, int], float] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)  # request -> chunks failed in a row
    unfinished: dict[str, int] = field(default_factory=dict)  # group -> samples left
    stream: SampleStream | None = None  # direct dispatch to the trainer ranks
    episodes: Episodes | None = None  # its multi-turn episodes, when it has any
