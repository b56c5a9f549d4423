"""DraftSync: a generator's background exchange with the draft-tree store.

Every `spec.sync_interval_s` it pushes this generator's new tokens to the store
(`TokensAppended`, one-way) and pulls what its replicas lack (`SyncDrafts`, a call answered
with `DraftDeltas`). While the batch is too large for drafts to pay it pushes 10x less
often and pulls only every `LIVENESS_CYCLES` cycles (to see the store is alive), and a
new group does not wake it; the speculator wakes it when drafting turns back on, and that
pull catches up. (Measured on the CPU, where drafts do not pay: a message to the store per
new group and per step that ended chunks cost the generators some 5% of their throughput,
the store taking cores from the engines; `seer bench drafts`.) A store that
does not answer costs drafts, never progress: appends are offered, never awaited (a full queue
drops them, and they are re-sent later), decoding goes on with what the replicas hold
(this generator's own requests) and the sync retries; a restarted store is refilled from
this generator's own copy of its requests (see `DraftClient`).

A chunk that ends sends its last tokens at once (`push_ended`, one-way; while drafting is
off and the store keeps no history they go with the next sync instead), before its result
goes to the scheduler (when the store's queue is full they go first with the next sync:
their request no longer runs here, so they cannot be re-read from it): the scheduler
closes a group as soon as its last sample is done, and
with `keep_history` the store keeps what it holds of the group then as the next rollout's
drafts. Left to the next sync (or to a slow-paced one, up to 10 intervals later) they came
after the close, and a short rollout's history lacked its ends or was empty.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence

import anyio
import structlog

from actors.base import Mailbox
from actors.drafts.client import DraftClient
from actors.generator.speculator import Speculator
from transport.errors import TransportError
from transport.messages import DraftDeltas, TokenAppend, TokensAppended

REPULL_S = 0.01  # how soon a pull that named groups the store had not opened is repeated
MAX_REPULLS = 50  # in a row (0.5 s), then the usual pace
MAX_UNSENT_ENDED = 4096  # ended chunks' appends kept for a store whose queue is full
LIVENESS_CYCLES = 20  # while not drafting, pull only every this many (slow) cycles
# while not drafting, lookups (explorations, a budget that grants nothing) catch the
# replicas up at most once per this many sync intervals (2 s at the default 50 ms)
CATCH_UP_INTERVALS = 40


class DraftSync:
    def __init__(
        self, speculator: Speculator, mailbox: Mailbox, log: structlog.BoundLogger
    ) -> None:
        if not isinstance(speculator.client, DraftClient):
            raise ValueError("draft sync needs a speculator with a draft client (mode 'group')")
        self.spec = speculator
        self.client = speculator.client
        self.mailbox = mailbox
        self.log = log
        self.is_store_ok = True
        self.num_store_failures = 0
        self.num_dropped_appends = 0
        self._wake = anyio.Event()
        self.unopened: tuple[str, ...] = ()  # the last pull's groups the store had not opened
        self.unsent_ended: list[TokenAppend] = []  # ended chunks' appends a full queue refused
        self.num_pulls = 0  # calls to the store (`SyncDrafts`)
        self.last_pull_at = -math.inf  # when a pull last named the running groups
        self.num_cycles = 0  # sync cycles run (pushes, pulls or neither)
        speculator.on_resume = self.catch_up  # drafting turned back on: catch up now

    async def run(self) -> None:
        """Push and pull forever (cancelled with the actor); never blocks decoding."""
        cfg = self.spec.config
        woken = False
        repulls = 0
        for cycle in itertools.count():
            self.num_cycles += 1
            # while drafts cannot pay at the running batch size, the loop runs 10x slower
            # and only every `LIVENESS_CYCLES`th cycle does anything: it pushes this
            # generator's tokens (other generators may draft from them; a chunk's last
            # tokens go at its end anyway) and asks the store for no group's tokens, only
            # whether it is alive (decoding siblings' tokens nobody drafts from, and the
            # store encoding them, took CPU from the engines: measured on the CPU, where
            # drafts do not pay, it cost the generators some 10% of their throughput); the
            # speculator wakes this loop when drafting resumes, and that pull catches up
            # A group new to this generator wakes the loop at once (`wake`): its first
            # pull may bring siblings' tokens or the last rollout's history to draft from,
            # which at the slow pace would arrive after a short request had finished; the
            # interval after a wake is a full-rate one too (`drafted_lately` is only decided at
            # the group's first decode step, after this sync)
            # A group the store has not opened yet (its `GroupsOpened` comes from the
            # splitter on another connection, and can come after this pull) has no history
            # in it yet: pulled again every `REPULL_S`, up to `MAX_REPULLS` times in a row.
            active = (self.spec.drafted_lately or woken) and self.is_store_ok
            wait_s = cfg.sync_interval_s * (1 if active else 10)
            if woken or not self.unopened:
                repulls = 0
            repull = bool(self.unopened) and repulls < MAX_REPULLS and active
            if repull:
                repulls += 1
                wait_s = min(wait_s, REPULL_S)
            with anyio.move_on_after(wait_s):
                await self._wake.wait()
            woken, self._wake = self._wake.is_set(), anyio.Event()
            if woken or repull or self.spec.drafted_lately:
                await self.sync_once(pull=True)
            elif not self.is_store_ok or cycle % LIVENESS_CYCLES == 0:
                await self.sync_once(pull=True, groups=False)

    def push_ended(self, request_ids: Sequence[str]) -> None:
        """These chunks ended here: offer their last tokens to the store now, ahead of their
        results (called on the actor's event loop; never awaits)."""
        for request_id in request_ids:
            self.client.end(request_id)
        appends = self.client.take_ended()
        if not appends:
            return
        if not self.spec.drafted_lately and not self.client.store_keeps_history:
            # drafts do not pay here and the store keeps no history: nobody needs them
            # before the next sync, which sends them first (no message per step now)
            self.unsent_ended.extend(appends)
            del self.unsent_ended[:-MAX_UNSENT_ENDED]
            return
        if not self.mailbox.offer("drafts", 0, TokensAppended(appends=appends)):
            # the store's queue is full: their request no longer runs here, so `rewind`
            # cannot bring them back; they are kept and go first with the next sync
            self.unsent_ended.extend(appends)
            self.num_dropped_appends += 1
            del self.unsent_ended[:-MAX_UNSENT_ENDED]  # a store gone for good: bounded

    def wake(self) -> None:
        """A new group started here: push and pull now, while drafting (called on the
        actor's event loop); while drafts do not pay its tree is not drafted from, and
        `catch_up` pulls it when drafting resumes."""
        if self.spec.drafted_lately:
            self._wake.set()

    def catch_up(self) -> None:
        """Drafts are looked up again after a pause: push and pull now, unless a pull
        naming the groups went out within the last `CATCH_UP_INTERVALS` sync intervals."""
        wait_s = CATCH_UP_INTERVALS * self.spec.config.sync_interval_s
        if time.monotonic() - self.last_pull_at >= wait_s:
            self._wake.set()

    async def sync_once(self, pull: bool, *, groups: bool = True) -> None:
        """Push this generator's new tokens; with ``pull``, ask the store for what the
        replicas lack (``groups``; else only whether it is alive, and how much of each
        running request it holds)."""
        cfg = self.spec.config
        ended, self.unsent_ended = self.unsent_ended, []
        appends = self.client.take_appends()
        request = self.client.sync_message(groups=groups) if pull else None
        try:
            if ended and not self.mailbox.offer("drafts", 0, TokensAppended(appends=tuple(ended))):
                self.unsent_ended = ended + self.unsent_ended  # still full: next time again
                self.num_dropped_appends += 1
            if appends and not self.mailbox.offer("drafts", 0, TokensAppended(appends=appends)):
                self.client.rewind(appends)  # the store's queue is full: they go next time
                self.num_dropped_appends += 1
            with anyio.fail_after(cfg.store_timeout_s):
                if request is not None:
                    self.num_pulls += 1
                    if request.groups:
                        self.last_pull_at = time.monotonic()
                    reply = await self.mailbox.call("drafts", 0, request, cfg.store_timeout_s)
                    if isinstance(reply, DraftDeltas):
                        self.client.apply(reply)
                        self.unopened = reply.unopened
        except (TransportError, TimeoutError) as exc:
            self.num_store_failures += 1
            if self.is_store_ok:
                self.log.warning("draft_store_unreachable", error=f"{type(exc).__name__}")
            self.is_store_ok = False
        else:
            if not self.is_store_ok:
                self.log.info("draft_store_back")
            self.is_store_ok = True
