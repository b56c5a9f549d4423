"""What the engine thread tells a request's handler: events, and the submission they reach.

``Delta`` (new tokens), ``Version`` (the weights changed before the next token) and ``Done``
(the request ended) travel in a tuple per engine step on the submission's ``asyncio.Queue``;
``push_all`` hands a step's tuples to the event loop in one wake-up. A non-streaming
submission gets only ``Done``: the engine thread writes its ``out`` and the handler reads it
once ``Done`` has arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from pipeline.serve.protocol import GenerateSpec, Output


@dataclass(frozen=True, slots=True)
class Delta:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Version:
    version: str


@dataclass(frozen=True, slots=True)
class Done:
    """The request ended: ``reason`` is ``stop`` / ``length`` / ``abort``."""

    reason: str
    matched: int | None = None
    message: str = ""
    is_queued: bool = False
    num_cached_tokens: int = 0
    num_retractions: int = 0


Event = Delta | Version | Done


@dataclass(slots=True, eq=False)
class Submission:
    """One request as the bridge tracks it. The engine thread writes ``out`` (tokens,
    logprobs, version spans) until it pushes ``Done``; the handler reads it after. Only a
    streaming request (``stream``) also gets ``Delta`` and ``Version`` events."""

    spec: GenerateSpec
    events: asyncio.Queue[tuple[Event, ...]]
    loop: asyncio.AbstractEventLoop
    stream: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # leave the gate
    out: Output = field(default_factory=Output)
    engine_id: str = ""
    num_cached_tokens: int = 0
    num_retractions: int = 0
    is_done: bool = False

    @property
    def generated(self) -> list[int]:
        return self.out.token_ids

    def push(self, *events: Event) -> None:
        push_all([(self, events)])


def push_all(batch: list[tuple[Submission, tuple[Event, ...]]]) -> None:
    """Hand each submission its events: one wake-up of the event loop for the lot."""
    kept = []
    for sub, events in batch:
        if any(isinstance(e, Done) for e in events):
            sub.is_done = True
        mine = events if sub.stream else tuple(e for e in events if isinstance(e, Done))
        if mine:
            kept.append((sub, mine))
    if not kept:
        return
    with contextlib.suppress(RuntimeError):  # a closed loop: no one is listening
        kept[0][0].loop.call_soon_threadsafe(deliver_events, kept)


def deliver_events(batch: list[tuple[Submission, tuple[Event, ...]]]) -> None:
    for sub, events in batch:
        sub.events.put_nowait(events)
