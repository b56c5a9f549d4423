"""DraftClient: a generator's local replicas of the draft trees it speculates from.

Pure and synchronous: the generator actor feeds it and moves its messages.
- `start(...)` when a chunk begins here: the request's sequence in its group's replica is
  set to the tokens the chunk starts from, and an incremental matcher is fed its context.
- `extend(rid, tokens)` after each engine step: the request's own tokens go into the
  local replica at once (so self-drafting never waits for the store) and are queued for
  the store (`take_appends`).
- `sync_message()` / `apply(deltas)`: the background sync names the groups with running
  requests and how far each replica has replayed the group's append log; the store answers
  with the entries after that, which are replayed into the replicas (idempotently: entries
  for tokens a replica already has change nothing; a new epoch means drop and replay).
- A chunk of a multi-turn episode starts after the observation its environment appended
  (`fresh` tokens no chunk generated): its appends start before them, so the store's copy
  of the request is its whole trajectory and siblings on other generators draft its later
  turns (the tokens before come from earlier chunks, whose generators sent them at their end).
- Appends are not trusted to arrive: one dropped at a full queue is re-queued (`rewind`),
  and each sync tells the store how much of each running request was sent; a store that
  holds less (an append lost on the way, a restarted store) gets the rest again from this
  generator's own copy. A different `store_id` (a restarted store) resets the replicas'
  cursors, so they replay the new store's log from its start.

- `speculate(rid, ...)` drafts from the replica with no network round trip.
Mode "self" keeps one private tree per request (SuffixDecoding over the request's own
output, no store); mode "group" shares one tree per group across siblings via the store.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.drafts.source import DraftSource
from actors.drafts.suffix_tree import MatcherLike, SpecResult, SuffixTree
from transport.messages import (
    PROMPT_TAIL_TOKENS,
    DraftDeltas,
    GroupCursor,
    SeqLength,
    SyncDrafts,
    TokenAppend,
)

DraftMode = Literal["self", "group"]


@dataclass
class _Seq:
    tree_id: int
    tokens: list[int] = field(default_factory=list)
    epoch: int = 0
    in_tree: bool = False  # a sequence enters the tree with its first token, as in the store


class GroupReplica:
    """A local copy of one group's tree: each sequence is prompt tail + tokens."""

    def __init__(self, group_id: str, prompt_tail: Sequence[int], max_depth: int) -> None:
        self.group_id = group_id
        self.prompt_tail = tuple(prompt_tail)
        self.tree = SuffixTree(max_depth)
        self.seqs: dict[str, _Seq] = {}
        self.own: set[str] = set()
        self.version = 0  # entries of the store's append log replayed
        self._next_id = 0

    def set_tokens(self, key: str, tokens: Sequence[int], epoch: int) -> None:
        """Make sequence `key` exactly `tokens` (appends when it is a prefix of them)."""
        seq = self.seqs.get(key)
        if seq is not None and seq.tokens == list(tokens[: len(seq.tokens)]):
            self.extend(key, tokens[len(seq.tokens) :])
            seq.epoch = epoch
            return
        if seq is not None and seq.in_tree:
            self.tree.remove(seq.tree_id)
        self.seqs[key] = _Seq(self._next_id, [], epoch)
        self._next_id += 1
        self.extend(key, tokens)

    def extend(self, key: str, tokens: Sequence[int]) -> None:
        seq = self.seqs.get(key)
        if seq is None:
            self.set_tokens(key, tokens, 0)
            return
        if not tokens:
            return
        seq.tokens.extend(tokens)
        if seq.in_tree:
            self.tree.append(seq.tree_id, tokens)
        else:
            self.tree.append(seq.tree_id, [*self.prompt_tail, *seq.tokens])
            seq.in_tree = True

    def apply(self, key: str, epoch: int, start: int, tokens: Sequence[int]) -> bool:
        """Replay one log entry; False (nothing changed) when it does not fit."""
        seq = self.seqs.get(key)
        if start == 0 and (seq is None or seq.epoch != epoch):
            self.set_tokens(key, tokens, epoch)
            return True
        if seq is None or seq.epoch != epoch or start > len(seq.tokens):
            return False
        have = seq.tokens[start : start + len(tokens)]
        if list(tokens[: len(have)]) != have:
            return False
        self.extend(key, tokens[len(have) :])
        return True


@dataclass
class _Running:
    group: str
    chunk_seq: int
    matcher: MatcherLike
    num_tokens: int  # the request's response tokens so far
    sent: int  # of which the store has been sent (queued) this many
    pending: list[int] = field(default_factory=list)  # not yet in the tree and matcher


class DraftClient(DraftSource):
    """The live `DraftSource`: local replicas of the store's trees (see the module)."""

    def __init__(
        self,
        mode: DraftMode = "group",
        *,
        max_depth: int = 64,
        max_match: int = 32,
        slack: int = 8,
        max_replicas: int = 1024,
    ) -> None:
        if mode not in ("self", "group"):
            raise ValueError(f"draft mode must be 'self' or 'group', got {mode!r}")
        self.mode: DraftMode = mode
        self.max_depth = max_depth
        self.max_match = max_match
        self.slack = slack
        self.max_replicas = max_replicas
        self.replicas: OrderedDict[str, GroupReplica] = OrderedDict()
        self.running: dict[str, _Running] = {}
        self._appends: list[TokenAppend] = []
        self._group_of: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}  # group -> its requests running here
        self.store_id = ""  # the store the replicas' cursors refer to
        self.store_keeps_history = True  # until the store's first reply says otherwise
        self.counters = {
            "synced_tokens": 0,
            "misfit_deltas": 0,
            "closed_groups": 0,
            "resent_appends": 0,
            "store_changes": 0,
        }

    # ---- requests --------------------------------------------------------------------
    def start(
        self,
        request_id: str,
        group_id: str,
        chunk_seq: int,
        prompt_ids: Sequence[int],
        generated_ids: Sequence[int],
        *,
        fresh: int = 0,
    ) -> bool:
        """Start drafting for a chunk of `request_id`; True when its group is new here (no
        replica yet: worth a pull from the store at once, which may hold its siblings'
        tokens or, with `keep_history`, the same prompt's responses of the last rollout).
        `fresh`: the last this many of `generated_ids` are an episode's observation, which
        the store has not been sent: the chunk's appends start before them."""
        gid = request_id if self.mode == "self" or not group_id else group_id
        is_new = gid not in self.replicas
        replica = self._replica(gid, prompt_ids[-PROMPT_TAIL_TOKENS:])
        seq = replica.seqs.get(request_id)
        replica.set_tokens(request_id, generated_ids, seq.epoch if seq else 0)
        replica.own.add(request_id)
        matcher = replica.tree.matcher(self.max_match, self.slack)
        matcher.feed([*prompt_ids[-self.max_match :], *generated_ids][-self.max_match :])
        n = len(generated_ids)
        sent = n - min(max(fresh, 0), n)
        self.running[request_id] = _Running(gid, chunk_seq, matcher, n, sent)
        self._group_of[request_id] = gid
        self._members.setdefault(gid, set()).add(request_id)
        return is_new and self.mode == "group"

    def extend(self, request_id: str, tokens: Sequence[int]) -> None:
        """New tokens of a request running here. They reach the tree and the matcher
        lazily (`_settle`), when the group is drafted from or synced: a step that drafts
        nothing costs a list append per request."""
        run = self.running.get(request_id)
        if run is None or not tokens:
            return
        run.pending.extend(tokens)
        run.num_tokens += len(tokens)

    def _settle(self, request_id: str, run: _Running) -> None:
        if not run.pending:
            return
        tokens, run.pending = run.pending, []
        replica = self.replicas.get(run.group)
        if replica is not None:
            replica.extend(request_id, tokens)
        run.matcher.feed(tokens)

    def _settle_group(self, group_id: str) -> None:
        for rid in self._members.get(group_id, ()):
            self._settle(rid, self.running[rid])

    def end(self, request_id: str) -> None:
        """The request's chunk ended here: its sequence is now the store's to update."""
        run = self.running.get(request_id)
        if run is None:
            return
        self._settle(request_id, run)
        self._flush(request_id, run)
        del self.running[request_id]
        members = self._members.get(run.group)
        if members is not None:
            members.discard(request_id)
            if not members:
                del self._members[run.group]
        replica = self.replicas.get(run.group)
        if replica is not None:
            replica.own.discard(request_id)

    def speculate(
        self, request_id: str, *, max_tokens: int, top_k_paths: int = 1, min_prob: float = 0.1
    ) -> SpecResult | None:
        run = self.running.get(request_id)
        if run is None or max_tokens <= 0:
            return None
        self._settle_group(run.group)
        return run.matcher.speculate(
            max_tokens=max_tokens, top_k_paths=top_k_paths, min_prob=min_prob
        )

    def forget(self, request_ids: Sequence[str]) -> None:
        """Drop the replicas of these requests' groups (a rollout ended)."""
        groups = {self._group_of.pop(r) for r in request_ids if r in self._group_of}
        self.drop_groups(sorted(groups))

    def drop_groups(self, group_ids: Sequence[str]) -> None:
        busy = {r.group for r in self.running.values()}
        for gid in group_ids:
            if gid not in busy:
                self.replicas.pop(gid, None)

    # ---- store traffic ---------------------------------------------------------------
    def take_appends(self) -> tuple[TokenAppend, ...]:
        """One append per request with tokens the store has not been sent (batched per
        sync rather than per step: an engine step only touches the local replica)."""
        for request_id, run in self.running.items():
            self._settle(request_id, run)
            self._flush(request_id, run)
        out, self._appends = tuple(self._appends), []
        return out

    def take_ended(self) -> tuple[TokenAppend, ...]:
        """Only the appends `end` queued (the last tokens of chunks that ended here since the
        last `take_appends`), for sending ahead of those chunks' results."""
        out, self._appends = tuple(self._appends), []
        return out

    def _flush(self, request_id: str, run: _Running) -> None:
        replica = self.replicas.get(run.group)
        if self.mode != "group" or run.num_tokens <= run.sent or replica is None:
            return
        tokens = replica.seqs[request_id].tokens[run.sent : run.num_tokens]
        self._appends.append(
            TokenAppend(
                group_id=run.group,
                request_id=request_id,
                chunk_seq=run.chunk_seq,
                start=run.sent,
                token_ids=tuple(tokens),
            )
        )
        run.sent = run.num_tokens

    def rewind(self, appends: Sequence[TokenAppend]) -> None:
        """These appends never left (dropped at a full queue): send their tokens again."""
        for a in appends:
            self._resend_from(a.request_id, a.start)

    def _resend_from(self, request_id: str, start: int) -> None:
        run = self.running.get(request_id)
        if run is not None and start < run.sent:
            run.sent = start
            self.counters["resent_appends"] += 1

    def sync_message(self, *, groups: bool = True) -> SyncDrafts | None:
        """What to ask the store for: None in self mode or with nothing running. Without
        ``groups`` it names no group (the store sends no tokens): a check that the store is
        alive and holds what this generator sent, for a generator not drafting now."""
        if self.mode != "group":
            return None
        running = sorted({r.group for r in self.running.values()})
        if not running:
            return None
        cursors = [
            GroupCursor(group_id=g, version=self.replicas[g].version)
            for g in (running if groups else ())
        ]
        own = [
            SeqLength(group_id=run.group, seq=rid, length=run.sent)
            for rid, run in self.running.items()
        ]
        return SyncDrafts(groups=tuple(cursors), store_id=self.store_id, own=tuple(own))

    def settle(self) -> None:
        """Bring every running request's tokens into its tree and matcher now."""
        for request_id, run in self.running.items():
            self._settle(request_id, run)

    def apply(self, msg: DraftDeltas) -> None:
        self.store_keeps_history = msg.keeps_history
        if msg.store_id != self.store_id:  # another store: its log versions start afresh
            if self.store_id:
                self.counters["store_changes"] += 1
            self.store_id = msg.store_id
            for rep in self.replicas.values():
                rep.version = 0
        for held in msg.lengths:
            run = self.running.get(held.seq)
            if run is not None and run.group == held.group_id:
                self._resend_from(held.seq, held.length)
        for d in msg.deltas:
            replica = self.replicas.get(d.group_id)
            if replica is None or d.seq in replica.own:
                continue
            if replica.apply(d.seq, d.epoch, d.start, d.token_ids):
                self.counters["synced_tokens"] += len(d.token_ids)
            else:
                self.counters["misfit_deltas"] += 1
        for cur in msg.versions:
            replica = self.replicas.get(cur.group_id)
            if replica is not None:
                replica.version = max(replica.version, cur.version)
        self.counters["closed_groups"] += len(msg.closed)
        self.drop_groups(msg.closed)

    # ---- internals -------------------------------------------------------------------
    def _replica(self, gid: str, prompt_tail: Sequence[int]) -> GroupReplica:
        replica = self.replicas.get(gid)
        if replica is None:
            replica = self.replicas[gid] = GroupReplica(gid, prompt_tail, self.max_depth)
            self._evict()
        self.replicas.move_to_end(gid)
        return replica

    def _evict(self) -> None:
        busy = {r.group for r in self.running.values()}
        for gid in list(self.replicas):
            if len(self.replicas) <= self.max_replicas:
                break
            if gid not in busy:
                del self.replicas[gid]
