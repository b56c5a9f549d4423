"""The draft link: generators <-> the draft-tree store (Seer's DGDS), and the scheduler's
notice that groups are closed."""

from __future__ import annotations

from dataclasses import dataclass

from transport.messages.base import Message, Struct


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenAppend(Struct):
    """Tokens `start .. start + len(token_ids)` of one request's response, written by the
    generator running chunk `chunk_seq` of it."""

    group_id: str
    request_id: str
    chunk_seq: int
    start: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TokensAppended(Message):
    """Generator -> draft store (one-way, batched)."""

    appends: tuple[TokenAppend, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCursor(Struct):
    """How much of a group's append log a replica has replayed."""

    group_id: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqLength(Struct):
    """How many response tokens of sequence `seq` of a group someone holds."""

    group_id: str
    seq: str
    length: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncDrafts(Message):
    """Generator -> draft store (call): the groups it drafts for, and how far it has
    replayed each one's log (0 = nothing yet) in the store it last heard from
    (`store_id`; another store, e.g. a restarted one, serves its log from the start);
    `own`: the sequences this generator writes and how many tokens it has sent of each
    (the store answers with how many it holds, so lost appends are re-sent)."""

    groups: tuple[GroupCursor, ...]
    store_id: str = ""
    own: tuple[SeqLength, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqDelta(Struct):
    """One entry of a group's append log: tokens `start ..` of a sequence at `epoch`;
    `start == 0` with a new epoch means: drop what you have of the sequence, replay."""

    group_id: str
    seq: str
    epoch: int
    start: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftDeltas(Message):
    """Draft store -> generator: the log entries each replica lacks, the versions they
    bring it to, and the groups that are gone."""

    deltas: tuple[SeqDelta, ...]
    versions: tuple[GroupCursor, ...] = ()
    closed: tuple[str, ...] = ()
    store_id: str = ""
    lengths: tuple[SeqLength, ...] = ()  # the store's length of each of the caller's `own`
    # named groups whose `GroupsOpened` the store has not had yet (unknown, or known only
    # from appends): their history, if any, comes with it
    unopened: tuple[str, ...] = ()
    # whether the store keeps closed groups as history (a generator not drafting then
    # still sends a chunk's last tokens ahead of its result; else they wait for its next
    # sync); True from a store that does not say (the safe side)
    keeps_history: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupsClosed(Message):
    """Scheduler -> draft store: every sample of these groups finished."""

    rollout_id: str
    group_ids: tuple[str, ...]
