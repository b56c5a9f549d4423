"""DraftStore (the store's core) and DraftClient (a generator's replicas): append rules,
incremental sync, replicas equal to the store's trees, history across iterations."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.drafts.client import DraftClient
from actors.drafts.store import HISTORY_PREFIX, DraftStore
from actors.drafts.suffix_tree import SuffixTreeLike
from transport.messages import GroupCursor, GroupInfo, SyncDrafts, TokenAppend

TAIL = (7, 8, 9)


def opened(store: DraftStore, *gids: str, prompt: str = "p", rollout: str = "r0") -> None:
    store.open_groups(
        rollout, [GroupInfo(group_id=g, prompt_id=prompt, size=2, prompt_tail=TAIL) for g in gids]
    )


def put(gid: str, rid: str, start: int, tokens: list[int], chunk: int = 0) -> TokenAppend:
    return TokenAppend(
        group_id=gid, request_id=rid, chunk_seq=chunk, start=start, token_ids=tuple(tokens)
    )


def tree_patterns(tree: SuffixTreeLike, depth: int) -> dict[tuple[int, ...], int]:
    """Every pattern present in `tree` up to `depth`, with its count."""
    out: dict[tuple[int, ...], int] = {}
    frontier: list[tuple[int, ...]] = [()]
    for _ in range(depth):
        nxt = []
        for p in frontier:
            for tok, n in tree.continuations(p).items():
                out[(*p, tok)] = n
                nxt.append((*p, tok))
        frontier = nxt
    return out


def test_appends_are_idempotent_and_order_checked() -> None:
    store = DraftStore(max_depth=8)
    opened(store, "g")
    assert store.append(put("g", "a", 0, [1, 2, 3])) == "applied"
    assert store.append(put("g", "a", 0, [1, 2, 3])) == "duplicate"
    assert store.append(put("g", "a", 1, [2, 3, 4])) == "applied"  # overlap: only 4 is new
    assert store.groups["g"].seqs["a"].tokens == [1, 2, 3, 4]
    assert store.append(put("g", "a", 6, [5])) == "gap"
    assert store.append(put("g", "b", 2, [5])) == "gap"  # a new sequence starts at 0
    assert store.groups["g"].seqs["a"].tokens == [1, 2, 3, 4]
    assert store.tree("g").count([*TAIL, 1, 2, 3, 4]) == 1


def test_a_newer_chunk_that_disagrees_replaces_and_bumps_the_epoch() -> None:
    store = DraftStore(max_depth=8)
    opened(store, "g")
    store.append(put("g", "a", 0, [1, 2, 3, 4], chunk=0))
    assert store.append(put("g", "a", 2, [9, 9], chunk=1)) == "replaced"
    log = store.groups["g"].seqs["a"]
    assert (log.tokens, log.epoch) == ([1, 2, 9, 9], 1)
    assert store.tree("g").count([3]) == 0
    # the dead writer wakes up: older chunk, refused
    assert store.append(put("g", "a", 4, [5], chunk=0)) == "stale"
    assert log.tokens == [1, 2, 9, 9]


def test_closed_groups_drop_appends_and_free_their_tree() -> None:
    store = DraftStore(max_depth=8)
    opened(store, "g")
    store.append(put("g", "a", 0, [1]))
    store.close_groups(["g"])
    assert "g" not in store.groups and store.is_closed("g")
    assert store.append(put("g", "a", 1, [2])) == "late"


def test_history_seeds_the_next_group_of_the_same_prompt() -> None:
    store = DraftStore(max_depth=8, keep_history=True)
    opened(store, "r0:g0", prompt="p")
    store.append(put("r0:g0", "a", 0, [1, 2, 3]))
    store.append(put("r0:g0", "b", 0, [4, 5]))
    store.close_groups(["r0:g0"])
    opened(store, "r1:g0", prompt="p", rollout="r1")
    seqs = store.groups["r1:g0"].seqs
    assert sorted(s.tokens for k, s in seqs.items() if k.startswith(HISTORY_PREFIX)) == [
        [1, 2, 3],
        [4, 5],
    ]
    assert store.tree("r1:g0").count([*TAIL, 1, 2, 3]) == 1
    opened(store, "r2:g0", prompt="q", rollout="r2")  # r1's groups are abandoned
    assert "r1:g0" not in store.groups and store.counters["groups_abandoned"] == 1


def test_history_survives_the_next_rollout_opening_before_the_last_one_closed() -> None:
    """`GroupsClosed` (scheduler) can arrive after the next rollout's `GroupsOpened`
    (splitter): the abandoned group's responses still seed the next group of its prompt."""
    store = DraftStore(max_depth=8, keep_history=True)
    opened(store, "r0:g0", prompt="p")
    store.append(put("r0:g0", "a", 0, [1, 2, 3]))
    opened(store, "r1:g0", prompt="p", rollout="r1")  # before r0's GroupsClosed
    store.close_groups(["r0:g0"])  # the late GroupsClosed: nothing left to close
    seqs = store.groups["r1:g0"].seqs
    assert [s.tokens for k, s in seqs.items() if k.startswith(HISTORY_PREFIX)] == [[1, 2, 3]]
    assert store.counters["groups_abandoned"] == 1


def test_appends_after_the_close_still_reach_the_history_and_the_next_group() -> None:
    """A generator's last appends of a group and the scheduler's `GroupsClosed` come on
    different connections, so the close can come first: the late tokens still extend the
    prompt's history, and the history copies of a group already opened for the prompt
    (which a synced replica then replays)."""
    store = DraftStore(max_depth=8, keep_history=True, history_size=2)
    opened(store, "r0:g0", prompt="p")
    store.append(put("r0:g0", "a", 0, [1, 2]))
    store.close_groups(["r0:g0"])
    assert store.append(put("r0:g0", "a", 2, [3])) == "history"  # before the next open
    assert store.history["p"] == [(1, 2, 3)]
    opened(store, "r1:g0", prompt="p", rollout="r1")
    client = DraftClient("group", max_depth=8, max_match=4)
    client.start("x", "r1:g0", 0, list(TAIL), [])
    client.apply(store.sync(client.sync_message()))  # type: ignore[arg-type]
    assert store.append(put("r0:g0", "a", 3, [4, 5])) == "history"  # after the next open
    assert store.append(put("r0:g0", "b", 0, [6])) == "history"  # a sample with no tokens in yet
    assert store.append(put("r0:g0", "a", 2, [3, 4])) == "late"  # nothing new: a duplicate
    assert store.append(put("r0:g0", "a", 9, [7])) == "late"  # a gap
    assert store.append(put("r0:g0", "a", 0, [9])) == "late"  # disagrees with the history
    assert store.append(put("r0:g0", "c", 0, [8])) == "late"  # no room (history_size 2)
    assert store.history["p"] == [(1, 2, 3, 4, 5), (6,)]
    seqs = store.groups["r1:g0"].seqs
    assert {k: s.tokens for k, s in seqs.items()} == {
        f"{HISTORY_PREFIX}0": [1, 2, 3, 4, 5],
        f"{HISTORY_PREFIX}1": [6],
    }
    assert store.counters["history_tokens"] == 4 and store.counters["late"] == 4
    client.apply(store.sync(client.sync_message()))  # type: ignore[arg-type]
    replica = client.replicas["r1:g0"]
    assert replica.seqs[f"{HISTORY_PREFIX}0"].tokens == [1, 2, 3, 4, 5]
    assert tree_patterns(replica.tree, 8) == tree_patterns(store.tree("r1:g0"), 8)
    store.close_groups(["r1:g0"])  # r1's responses are p's history now, not r0's
    assert store.append(put("r0:g0", "a", 5, [6])) == "late"
    opened(store, "r2:g1", prompt="q", rollout="r2")
    store.append(put("r2:g1", "a", 0, [1]))
    store.close_groups(["r2:g1"])
    assert store.append(put("r2:g1", "a", 1, [2])) == "history"  # only q's groups change
    assert store.history["q"] == [(1, 2)] and store.history["p"] == []
    plain = DraftStore(max_depth=8)  # without keep_history a closed group's appends are late
    opened(plain, "g")
    plain.close_groups(["g"])
    assert plain.append(put("g", "a", 0, [1])) == "late"


def test_appends_before_groups_opened_are_rebuilt_under_the_prompt_tail() -> None:
    store = DraftStore(max_depth=8)
    ask = SyncDrafts(groups=(GroupCursor(group_id="g", version=0),), store_id=store.store_id)
    assert store.sync(ask).unopened == ("g",)  # unknown: the caller asks again soon
    store.append(put("g", "a", 0, [1, 2]))
    assert store.tree("g").count([1, 2]) == 1
    assert store.sync(ask).unopened == ("g",)  # known from appends only: still unopened
    opened(store, "g")
    assert store.tree("g").count([*TAIL, 1, 2]) == 1
    assert store.sync(ask).unopened == ()


def test_sync_sends_only_what_the_replica_lacks() -> None:
    store = DraftStore(max_depth=8)
    opened(store, "g")
    client = DraftClient("group", max_depth=8, max_match=4)
    client.start("a", "g", 0, [5, *TAIL], [])
    store.append(put("g", "b", 0, [1, 2, 3]))
    msg = client.sync_message()
    assert msg is not None and msg.groups == (GroupCursor(group_id="g", version=0),)
    first = store.sync(msg)
    assert [(d.seq, d.start, d.token_ids) for d in first.deltas] == [("b", 0, (1, 2, 3))]
    assert first.versions == (GroupCursor(group_id="g", version=1),)
    client.apply(first)
    store.append(put("g", "b", 3, [4]))
    second = store.sync(client.sync_message())  # type: ignore[arg-type]
    assert [(d.seq, d.start, d.token_ids) for d in second.deltas] == [("b", 3, (4,))]
    client.apply(second)
    assert store.sync(client.sync_message()).deltas == ()  # type: ignore[arg-type]


def test_replica_replays_a_replaced_sequence() -> None:
    store = DraftStore(max_depth=8)
    opened(store, "g")
    client = DraftClient("group", max_depth=8, max_match=4)
    client.start("a", "g", 0, list(TAIL), [])
    store.append(put("g", "b", 0, [1, 2, 3], chunk=0))
    client.apply(store.sync(client.sync_message()))  # type: ignore[arg-type]
    store.append(put("g", "b", 1, [6], chunk=1))
    client.apply(store.sync(client.sync_message()))  # type: ignore[arg-type]
    assert client.replicas["g"].seqs["b"].tokens == [1, 6]
    assert client.replicas["g"].tree.count([2]) == 0


def test_start_says_when_a_group_is_new_here() -> None:
    """The generator pulls a new group's tree at once (its siblings elsewhere or the last
    rollout's history may already be in the store); later chunks of it do not ask."""
    client = DraftClient("group", max_depth=8, max_match=4)
    assert client.start("a", "g", 0, list(TAIL), []) is True
    assert client.start("b", "g", 0, list(TAIL), []) is False  # a sibling: replica exists
    assert client.start("a", "g", 1, list(TAIL), [1]) is False  # its next chunk
    assert client.start("c", "h", 0, list(TAIL), []) is True
    own = DraftClient("self", max_depth=8, max_match=4)  # no store to pull from
    assert own.start("a", "g", 0, list(TAIL), []) is False


def test_own_tokens_reach_the_replica_before_drafting_and_the_store_as_one_append() -> None:
    client = DraftClient("group", max_depth=8, max_match=4)
    client.start("a", "g", 3, list(TAIL), [1])
    client.start("b", "g", 0, list(TAIL), [])
    client.extend("a", [2, 3])
    client.extend("a", [4])
    assert client.replicas["g"].seqs["a"].tokens == [1]  # lazily: nothing drafted yet
    client.speculate("b", max_tokens=2)  # drafting from the group settles its requests
    assert client.replicas["g"].seqs["a"].tokens == [1, 2, 3, 4]
    appends = client.take_appends()
    got = [(a.start, a.token_ids, a.chunk_seq) for a in appends]
    assert got == [(1, (2, 3, 4), 3)]  # merged between syncs
    assert client.take_appends() == ()


def test_replaying_a_log_entry_twice_changes_nothing() -> None:
    client = DraftClient("group", max_depth=8, max_match=4)
    client.start("a", "g", 0, list(TAIL), [1, 2])
    client.end("a")  # no longer written here; the store's entries for it may still come
    replica = client.replicas["g"]
    assert replica.apply("a", 0, 0, [1, 2]) and replica.apply("a", 0, 1, [2, 3])
    assert replica.seqs["a"].tokens == [1, 2, 3]
    assert not replica.apply("a", 0, 5, [9])  # a gap does not fit
    assert replica.tree.count([*TAIL, 1, 2, 3]) == 1


def test_self_mode_keeps_one_private_tree_per_request_and_never_syncs() -> None:
    client = DraftClient("self", max_depth=8, max_match=4)
    client.start("a", "g", 0, list(TAIL), [1, 2])
    client.start("b", "g", 0, list(TAIL), [1, 2])
    client.extend("a", [1, 2])
    assert set(client.replicas) == {"a", "b"}
    assert client.sync_message() is None and client.take_appends() == ()
    res = client.speculate("a", max_tokens=4)
    assert res is not None and res.token_ids[:1] == (1,)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 4), min_size=1, max_size=6)),
        min_size=1,
        max_size=30,
    ),
    st.integers(0, 2**31),
)
def test_a_synced_replica_equals_the_stores_tree(
    writes: list[tuple[int, list[int]]], seed: int
) -> None:
    """Writers 0-1 live on this generator (own sequences), 2-3 elsewhere; syncs happen at
    random moments; afterwards the replica's tree has exactly the store's patterns."""
    rng = random.Random(seed)
    store = DraftStore(max_depth=6)
    opened(store, "g")
    client = DraftClient("group", max_depth=6, max_match=3)
    for w in (0, 1):
        client.start(f"s{w}", "g", 0, list(TAIL), [])
    lengths = dict.fromkeys(range(4), 0)
    for w, tokens in writes:
        rid = f"s{w}"
        if w < 2:
            client.extend(rid, tokens)
        else:
            store.append(put("g", rid, lengths[w], tokens))
        lengths[w] += len(tokens)
        if rng.random() < 0.3:
            for a in client.take_appends():
                store.append(a)
            client.apply(store.sync(client.sync_message()))  # type: ignore[arg-type]
    for a in client.take_appends():
        store.append(a)
    for w in (0, 1):
        client.end(f"s{w}")
    replica = client.replicas["g"]
    client.apply(
        store.sync(SyncDrafts(groups=(GroupCursor(group_id="g", version=replica.version),)))
    )
    store_seqs = {k: s.tokens for k, s in store.groups["g"].seqs.items()}
    replica_seqs = {k: s.tokens for k, s in replica.seqs.items() if s.tokens}
    assert replica_seqs == store_seqs
    assert tree_patterns(client.replicas["g"].tree, 6) == tree_patterns(store.tree("g"), 6)


def test_bad_store_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="history_size"):
        DraftStore(history_size=-1)
    with pytest.raises(ValueError, match="draft mode"):
        DraftClient("siblings")  # type: ignore[arg-type]


def test_replica_lru_keeps_groups_with_running_requests() -> None:
    client = DraftClient("group", max_depth=8, max_match=4, max_replicas=2)
    client.start("a", "g0", 0, list(TAIL), [])
    for i, gid in zip(itertools.count(), ("g1", "g2", "g3"), strict=False):
        client.start(f"x{i}", gid, 0, list(TAIL), [])
        client.end(f"x{i}")
    assert "g0" in client.replicas and len(client.replicas) == 2


def test_an_episodes_observations_reach_the_store_so_siblings_draft_its_later_turns() -> None:
    """A multi-turn episode's chunk starts after the observation its environment appended
    (`fresh` tokens): the store gets the observation with the new action (no gap), also when
    the turn moved to another generator or follows the reset's observation, so a sibling on
    another generator drafts the later turn; a plain continuation sends as before."""
    store = DraftStore(max_depth=16)
    opened(store, "g")
    here, there = DraftClient("group", max_depth=16), DraftClient("group", max_depth=16)
    here.start("a", "g", 1, list(TAIL), [40], fresh=1)  # the reset's observation
    here.extend("a", [1, 2, 3])  # turn 1's action
    here.end("a")
    assert [(x.start, x.token_ids) for x in here.take_appends()] == [(0, (40, 1, 2, 3))]
    here.start("a", "g", 2, list(TAIL), [40, 1, 2, 3])  # a chunk that made nothing new
    here.end("a")
    assert here.take_appends() == ()
    store.append(put("g", "a", 0, [40, 1, 2, 3], chunk=1))
    here.start("a", "g", 3, list(TAIL), [40, 1, 2, 3, 50, 51], fresh=2)  # + the observation
    here.extend("a", [4, 5, 6])  # turn 2's action
    here.end("a")
    appends = here.take_appends()
    assert [(x.start, x.token_ids) for x in appends] == [(4, (50, 51, 4, 5, 6))]
    assert [store.append(x) for x in appends] == ["applied"]
    # turn 3 on another generator, which never ran the request
    there.start("a", "g", 4, list(TAIL), [40, 1, 2, 3, 50, 51, 4, 5, 6, 52], fresh=1)
    there.extend("a", [7])
    there.end("a")
    assert [store.append(x) for x in there.take_appends()] == ["applied"]
    assert store.groups["g"].seqs["a"].tokens == [40, 1, 2, 3, 50, 51, 4, 5, 6, 52, 7]
    assert store.counters["gaps"] == 0
    # a sibling elsewhere (whose generator has synced the group), at the same point of its
    # own episode, drafts turn 2's action
    there.start("c", "g", 1, list(TAIL), [])
    there.apply(store.sync(there.sync_message()))  # type: ignore[arg-type]
    there.start("b", "g", 3, list(TAIL), [40, 1, 2, 3, 50, 51], fresh=2)
    draft = there.speculate("b", max_tokens=3)
    assert draft is not None and draft.token_ids[:3] == (4, 5, 6)
    # a chunk continuing where the last one ended sends only its own tokens
    here.start("a", "g", 5, list(TAIL), [40, 1, 2, 3, 50, 51, 4, 5, 6, 52, 7])
    here.extend("a", [8])
    assert [(x.start, x.token_ids) for x in here.take_appends()] == [(11, (8,))]
