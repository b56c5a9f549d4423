"""DraftStore: the pure core of Seer's draft-tree store (DGDS), one suffix tree per group.

Every sequence of a group is one sibling's response, stored after the group's prompt tail
(the prompt's last `PROMPT_TAIL_TOKENS` tokens, identical for all siblings) so drafts can
start at the first response token. Appends are keyed by (group, request, start):
- idempotent: tokens the store already has are skipped, so a re-sent batch changes nothing;
- order-checked: a write that would leave a gap is refused ("gap"); a write from an older
  chunk of the request than one already seen is refused ("stale", e.g. a generator that
  was declared dead and woke up later);
- a write from a newer chunk that disagrees with stored tokens (a chunk re-run from its
  committed progress after a generator died) truncates the sequence there and bumps its
  epoch, so replicas replay it.
Every change is also an entry of the group's append log (a `SeqDelta`); a replica that has
replayed `version` entries gets the entries after them from `sync` and nothing else, so a
sync costs what changed, not what the group holds. `close_groups` frees a group's tree, or,
with `keep_history`, keeps its responses as extra sequences for the next group opened for
the same prompt (drafts from the previous iteration; beyond Seer). The scheduler's
`GroupsClosed` and a generator's last appends of the group travel on different connections,
so the close can come first: an append to a group whose responses are its prompt's history
still lands there ("history"), and in the history sequences of groups already opened for
that prompt, so the next rollout drafts from whole responses.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.drafts.suffix_tree import SuffixTree, SuffixTreeLike
from transport.messages import (
    DraftDeltas,
    GroupCursor,
    GroupInfo,
    SeqDelta,
    SeqLength,
    SyncDrafts,
    TokenAppend,
)

HISTORY_PREFIX = "history:"
_READ_ONLY = 1 << 62  # chunk_seq of history sequences: every append to them is stale

AppendOutcome = Literal["applied", "duplicate", "replaced", "stale", "gap", "late", "history"]


@dataclass
class SeqLog:
    tree_id: int
    tokens: list[int] = field(default_factory=list)
    epoch: int = 0
    chunk_seq: int = -1


@dataclass
class GroupLog:
    """One group's sequences and their suffix tree (each sequence = prompt tail + tokens)."""

    group_id: str
    prompt_id: str
    prompt_tail: tuple[int, ...]
    tree: SuffixTreeLike
    rollout_id: str = ""
    seqs: dict[str, SeqLog] = field(default_factory=dict)
    next_id: int = 0
    log: list[SeqDelta] = field(default_factory=list)  # every change, in order
    is_opened: bool = False  # by `GroupsOpened` (not only by appends that came first)

    def add_seq(self, key: str, tokens: Sequence[int] = (), chunk_seq: int = -1) -> SeqLog:
        seq = self.seqs[key] = SeqLog(self.next_id, list(tokens), 0, chunk_seq)
        self.next_id += 1
        self.tree.append(seq.tree_id, [*self.prompt_tail, *tokens])
        self._record(key, seq, 0)
        return seq

    def extend(self, key: str, seq: SeqLog, tokens: Sequence[int]) -> None:
        start = len(seq.tokens)
        seq.tokens.extend(tokens)
        self.tree.append(seq.tree_id, tokens)
        self._record(key, seq, start)

    def replace(self, key: str, seq: SeqLog, start: int, tokens: Sequence[int]) -> None:
        del seq.tokens[start:]
        seq.tokens.extend(tokens)
        seq.epoch += 1
        self.tree.remove(seq.tree_id)
        self.tree.append(seq.tree_id, [*self.prompt_tail, *seq.tokens])
        self._record(key, seq, 0)

    def _record(self, key: str, seq: SeqLog, start: int) -> None:
        tokens = tuple(seq.tokens[start:])
        self.log.append(
            SeqDelta(
                group_id=self.group_id, seq=key, epoch=seq.epoch, start=start, token_ids=tokens
            )
        )

    def set_prompt_tail(self, tail: tuple[int, ...]) -> None:
        """Rebuild the tree under a new prompt tail (appends came before `GroupsOpened`;
        replicas take the tail from their own copy of the prompt)."""
        self.prompt_tail = tail
        for seq in self.seqs.values():
            self.tree.remove(seq.tree_id)
            self.tree.append(seq.tree_id, [*tail, *seq.tokens])


def coalesce(entries: Sequence[SeqDelta]) -> list[SeqDelta]:
    """The same replay in fewer entries: each sequence's consecutive entries at one epoch
    that continue one another become one (each sequence's entries keep their order; the
    order across sequences does not matter to a replica). A pull after a while without
    one named hundreds of small appends per group, and encoding them one by one was most
    of the store's CPU (measured: `seer bench drafts`, 128 prompts)."""
    runs: dict[str, list[tuple[int, int, list[int]]]] = {}
    group_id = entries[0].group_id if entries else ""
    for d in entries:
        seq_runs = runs.setdefault(d.seq, [])
        if seq_runs:
            epoch, start, tokens = seq_runs[-1]
            if d.epoch == epoch and d.start == start + len(tokens):
                tokens.extend(d.token_ids)
                continue
        seq_runs.append((d.epoch, d.start, list(d.token_ids)))
    return [
        SeqDelta(group_id=group_id, seq=seq, epoch=epoch, start=start, token_ids=tuple(tokens))
        for seq, seq_runs in runs.items()
        for epoch, start, tokens in seq_runs
    ]


class DraftStore:
    def __init__(
        self,
        *,
        max_depth: int = 64,
        keep_history: bool = False,
        history_size: int = 16,
        max_closed: int = 100_000,
    ) -> None:
        if history_size < 0:
            raise ValueError(f"history_size must be >= 0, got {history_size}")
        self.store_id = secrets.token_hex(8)  # a restarted store is another store
        self.max_depth = max_depth
        self.keep_history = keep_history
        self.history_size = history_size
        self.groups: dict[str, GroupLog] = {}
        self.history: dict[str, list[tuple[int, ...]]] = {}
        self._history_keys: dict[str, list[str]] = {}  # prompt -> its entries' requests
        self._kept: dict[str, str] = {}  # closed group -> its prompt, whose history it is
        self._kept_group: dict[str, str] = {}  # prompt -> the closed group its history is
        self._open_of_prompt: dict[str, set[str]] = {}  # prompt -> its open groups
        self._closed: set[str] = set()
        self._closed_order: deque[str] = deque()
        self._max_closed = max_closed
        self.counters: dict[str, int] = {
            "appended_tokens": 0,
            "duplicate_tokens": 0,
            "replaced": 0,
            "stale": 0,
            "gaps": 0,
            "late": 0,
            "history_tokens": 0,  # tokens of appends that came after their group closed
            "groups_opened": 0,
            "groups_closed": 0,
            "groups_abandoned": 0,
            "synced_tokens": 0,
        }

    # ---- groups ----------------------------------------------------------------------
    def open_groups(self, rollout_id: str, groups: Iterable[GroupInfo]) -> None:
        """Open a rollout's groups; groups still open from other rollouts are abandoned
        (closed, and with `keep_history` kept as history like any closed group: the
        scheduler's `GroupsClosed` for the last rollout and the splitter's `GroupsOpened` for
        the next come from different actors, so the next rollout's groups can open first)."""
        stale = [g for g, log in self.groups.items() if log.rollout_id not in ("", rollout_id)]
        self.counters["groups_abandoned"] += len(stale)
        self.close_groups(stale)
        for info in groups:
            tail = tuple(info.prompt_tail)
            log = self.groups.get(info.group_id)
            if log is None:
                log = self._new_group(info.group_id, info.prompt_id, tail)
            elif log.prompt_tail != tail:
                log.set_prompt_tail(tail)
            log.prompt_id, log.rollout_id, log.is_opened = info.prompt_id, rollout_id, True
            self._open_of_prompt.setdefault(info.prompt_id, set()).add(info.group_id)
            for i, tokens in enumerate(self.history.get(info.prompt_id, ())):
                key = f"{HISTORY_PREFIX}{i}"
                if key not in log.seqs:
                    log.add_seq(key, tokens, chunk_seq=_READ_ONLY)
            self.counters["groups_opened"] += 1

    def close_groups(self, group_ids: Iterable[str], *, keep: bool = True) -> None:
        for gid in group_ids:
            log = self.groups.pop(gid, None)
            if log is None:
                continue
            prompt = log.prompt_id
            open_groups = self._open_of_prompt.get(prompt)
            if open_groups is not None:
                open_groups.discard(gid)
                if not open_groups:
                    del self._open_of_prompt[prompt]
            if keep and self.keep_history and prompt:
                live = [
                    (k, tuple(s.tokens))
                    for k, s in log.seqs.items()
                    if s.tokens and not k.startswith(HISTORY_PREFIX)
                ][: self.history_size]
                self.history[prompt] = [tokens for _, tokens in live]
                self._history_keys[prompt] = [k for k, _ in live]
                self._kept.pop(self._kept_group.get(prompt, ""), None)
                self._kept[gid], self._kept_group[prompt] = prompt, gid
            self._mark_closed(gid)
            self.counters["groups_closed"] += 1

    def is_closed(self, group_id: str) -> bool:
        return group_id in self._closed

    def tree(self, group_id: str) -> SuffixTreeLike:
        return self.groups[group_id].tree

    # ---- appends ---------------------------------------------------------------------
    def append(self, a: TokenAppend) -> AppendOutcome:
        if a.group_id in self._closed:
            prompt = self._kept.get(a.group_id)
            if prompt is not None and self._append_history(prompt, a):
                return "history"
            self.counters["late"] += 1
            return "late"
        group = self.groups.get(a.group_id)
        if group is None:  # appends raced ahead of GroupsOpened: open it bare
            group = self._new_group(a.group_id, "", ())
        log = group.seqs.get(a.request_id)
        if log is None:
            if a.start != 0:
                self.counters["gaps"] += 1
                return "gap"
            group.add_seq(a.request_id, a.token_ids, a.chunk_seq)
            self.counters["appended_tokens"] += len(a.token_ids)
            return "applied"
        if a.chunk_seq < log.chunk_seq:
            self.counters["stale"] += 1
            return "stale"
        if a.start > len(log.tokens):
            self.counters["gaps"] += 1
            return "gap"
        log.chunk_seq = a.chunk_seq
        have = log.tokens[a.start : a.start + len(a.token_ids)]
        if list(a.token_ids[: len(have)]) != have:
            group.replace(a.request_id, log, a.start, a.token_ids)
            self.counters["replaced"] += 1
            self.counters["appended_tokens"] += len(a.token_ids)
            return "replaced"
        new = a.token_ids[len(have) :]
        self.counters["duplicate_tokens"] += len(have)
        if not new:
            return "duplicate"
        group.extend(a.request_id, log, new)
        self.counters["appended_tokens"] += len(new)
        return "applied"

    def _append_history(self, prompt: str, a: TokenAppend) -> bool:
        """A late append of a group kept as `prompt`'s history: extend the request's entry
        (a new one while there is room) and the open groups' copies of it; False when it
        does not fit (a gap, a disagreement, no room) or brings nothing new."""
        keys, entries = self._history_keys[prompt], self.history[prompt]
        if not a.token_ids:
            return False
        if a.request_id in keys:
            i = keys.index(a.request_id)
        elif a.start == 0 and len(keys) < self.history_size:
            i = len(keys)
            keys.append(a.request_id)
            entries.append(())
        else:
            return False
        have = entries[i]
        overlap = have[a.start : a.start + len(a.token_ids)]
        if a.start > len(have) or tuple(a.token_ids[: len(overlap)]) != overlap:
            return False
        new = a.token_ids[len(overlap) :]
        if not new:
            return False
        entries[i] = tokens = (*have, *new)
        self.counters["history_tokens"] += len(new)
        key = f"{HISTORY_PREFIX}{i}"
        for gid in self._open_of_prompt.get(prompt, ()):
            group = self.groups.get(gid)
            if group is None or group.prompt_id != prompt:
                continue
            seq = group.seqs.get(key)
            if seq is None:
                group.add_seq(key, tokens, chunk_seq=_READ_ONLY)
            elif len(seq.tokens) < len(tokens) and tuple(seq.tokens) == tokens[: len(seq.tokens)]:
                group.extend(key, seq, tokens[len(seq.tokens) :])
        return True

    # ---- replicas --------------------------------------------------------------------
    def sync(self, msg: SyncDrafts) -> DraftDeltas:
        """The log entries each named group has past the replica's version (all of them
        for a replica that last synced with another store: its versions mean nothing
        here), how many tokens of each of the caller's own sequences the store holds
        (fewer than it sent: appends were lost, and it re-sends from its own copy), and
        which named groups are not opened yet (the caller asks again soon: the splitter's
        `GroupsOpened`, which brings the history, can come after a generator's pull)."""
        deltas: list[SeqDelta] = []
        versions: list[GroupCursor] = []
        closed: list[str] = []
        unopened: list[str] = []
        same_store = msg.store_id == self.store_id
        for cur in msg.groups:
            group = self.groups.get(cur.group_id)
            if group is None or not group.is_opened:
                if cur.group_id in self._closed:
                    closed.append(cur.group_id)
                else:
                    unopened.append(cur.group_id)
            if group is None:
                continue
            since = max(cur.version, 0) if same_store else 0
            if since < len(group.log) or not same_store:
                new = group.log[since:]
                deltas.extend(coalesce(new))
                self.counters["synced_tokens"] += sum(len(d.token_ids) for d in new)
                versions.append(GroupCursor(group_id=cur.group_id, version=len(group.log)))
        lengths = []
        for own in msg.own:
            group = self.groups.get(own.group_id)
            if own.group_id in self._closed:
                continue
            seq = group.seqs.get(own.seq) if group is not None else None
            held = len(seq.tokens) if seq is not None else 0
            lengths.append(SeqLength(group_id=own.group_id, seq=own.seq, length=held))
        return DraftDeltas(
            deltas=tuple(deltas),
            versions=tuple(versions),
            closed=tuple(closed),
            store_id=self.store_id,
            lengths=tuple(lengths),
            unopened=tuple(unopened),
            keeps_history=self.keep_history,
        )

    # ---- internals -------------------------------------------------------------------
    def _new_group(self, gid: str, prompt_id: str, tail: tuple[int, ...]) -> GroupLog:
        log = self.groups[gid] = GroupLog(gid, prompt_id, tail, SuffixTree(self.max_depth))
        return log

    def _mark_closed(self, gid: str) -> None:
        self._closed.add(gid)
        self._closed_order.append(gid)
        while len(self._closed_order) > self._max_closed:
            self._closed.discard(self._closed_order.popleft())
