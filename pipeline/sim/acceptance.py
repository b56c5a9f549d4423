"""AcceptanceTable: how many draft tokens hold, by sibling references, from real suffix trees.

Speculation in the simulator is not a mean acceptance rate: at every planned stretch of
decode steps a request drafts with the acceptance its group's suffix tree would give *now*,
which depends on how many of its siblings have already generated past its position
(``refs``: finished siblings, or running ones further along). The table behind that is
measured here, by running the project's suffix tree (``actors.drafts.suffix_tree``, the
compiled core) over synthetic sibling token streams:

Sibling-similarity model (stated, tunable): a group has a reference stream built like text
with self-repetition (each span of ``span`` tokens is, with probability ``p_repeat``, a copy
of an earlier span, else fresh tokens from a vocabulary of ``vocab``). Each sibling walks
the reference: at each token, with probability ``p_noise`` it emits a random token, with
probability ``p_jump`` it jumps to a random place of the reference, otherwise it copies the
next reference token. The request under test is one more sibling: its own stream is
appended to the tree as it is generated (self-drafting, SuffixDecoding), and ``refs`` other
siblings' full streams are in the tree too. At sampled positions it drafts a chain of up to
``g_max`` tokens (``top_k_paths=1``) through an incremental matcher, exactly as a live
generator does, and the draft is checked against its own next tokens.

Defaults are tuned so that the mean acceptance length (bonus token included) at g_max = 8
is near Seer's published figures for chains (Qwen2-VL-72B, REFERENCES.md): 1.70 with no
sibling, 2.04 with one, 2.32 with five, 2.53 with fifteen. ``accept[k][j]`` is the chance
that at least j draft tokens hold with k references; ``probs[k][j]`` the mean path
probability the tree gave node j (what the MBA policy ranks nodes by).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from actors.drafts.store import DraftStore
from actors.drafts.suffix_tree import SuffixTree, SuffixTreeLike
from transport.messages import GroupInfo, TokenAppend

__all__ = [
    "RHYME_TOKEN_RECURRENCE",
    "AcceptanceTable",
    "SiblingModel",
    "acceptance_from_streams",
    "measure_acceptance",
    "measure_history_acceptance",
]

REFS = (0, 1, 2, 4, 8, 15)
_OTHERS = 1 << 20  # tree ids of the measured streams (a draft store's own start at 0)
# RhymeRL (REFERENCES.md): about 93% of rollout tokens recur across adjacent epochs
RHYME_TOKEN_RECURRENCE = 0.93
SEER_CHAIN_ACCEPTANCE = {0: 1.70, 1: 2.04, 5: 2.32, 15: 2.53}  # REFERENCES.md, k = 1


@dataclass(frozen=True, slots=True)
class SiblingModel:
    vocab: int = 4000
    span: int = 24
    p_repeat: float = 0.7
    p_noise: float = 0.2
    p_jump: float = 0.02
    length: int = 800
    num_groups: int = 2
    sample_every: int = 3
    seed: int = 0


@dataclass(slots=True)
class AcceptanceTable:
    refs: tuple[int, ...]
    g_max: int
    accept: list[list[float]]  # [ref index][j], j = 0..g_max; accept[.][0] = 1
    probs: list[list[float]]  # [ref index][j]: mean path probability of node j (j >= 1)
    # the synthetic model the streams came from; None: recorded output
    model: SiblingModel | None = field(default_factory=SiblingModel)

    def row(self, refs: int) -> int:
        """Index of the measured reference count at or below ``refs``."""
        i = 0
        for k, r in enumerate(self.refs):
            if r <= refs:
                i = k
        return i

    def expected_tokens(self, refs: int, g: int) -> float:
        """Tokens per verify step with a g-token chain, bonus token included."""
        a = self.accept[self.row(refs)]
        return 1.0 + sum(a[1 : min(g, self.g_max) + 1])

    def as_dict(self) -> dict[str, object]:
        return {
            "refs": list(self.refs),
            "mean_acceptance_length_gmax": {
                str(r): round(self.expected_tokens(r, self.g_max), 3) for r in self.refs
            },
            "seer_published": {str(k): v for k, v in SEER_CHAIN_ACCEPTANCE.items()},
        }


def _reference(m: SiblingModel, rng: random.Random) -> list[int]:
    out: list[int] = []
    while len(out) < m.length * 2:
        if out and rng.random() < m.p_repeat:
            start = rng.randrange(0, max(1, len(out) - m.span))
            out.extend(out[start : start + m.span])
        else:
            out.extend(rng.randrange(m.vocab) for _ in range(m.span))
    return out


def _sibling(ref: list[int], m: SiblingModel, rng: random.Random) -> list[int]:
    out: list[int] = []
    q = 0
    while len(out) < m.length:
        u = rng.random()
        if u < m.p_noise:
            out.append(rng.randrange(m.vocab))
        elif u < m.p_noise + m.p_jump:
            q = rng.randrange(len(ref) - 1)
        else:
            out.append(ref[q % len(ref)])
            q += 1
    return out


class _Tally:
    """Drafts and their outcomes per reference count, as a live generator would see them."""

    def __init__(self, refs: tuple[int, ...], g_max: int) -> None:
        self.refs, self.g_max = refs, g_max
        self.hits = [[0.0] * (g_max + 1) for _ in refs]
        self.pp = [[0.0] * (g_max + 1) for _ in refs]
        self.drafts = [0] * len(refs)

    def run(
        self,
        i: int,
        own: list[int],
        others: list[list[int]],
        every: int,
        tree: SuffixTreeLike | None = None,
    ) -> None:
        """``own`` drafts from a tree holding ``others`` (whole) and its own stream so far:
        a chain of up to ``g_max`` tokens every ``every`` tokens, checked against ``own``.
        ``tree``: a tree that already holds more (a draft store's history); else a new one."""
        g_max = self.g_max
        tree = tree if tree is not None else SuffixTree(64)
        for s, stream in enumerate(others, start=1):
            tree.append(_OTHERS + s, stream)
        matcher = tree.matcher(32, 8)
        fed = 0
        for t in range(0, len(own) - g_max, every):
            tree.append(_OTHERS, own[fed:t])
            matcher.feed(own[fed:t])
            fed = t
            d = matcher.speculate(max_tokens=g_max, top_k_paths=1, min_prob=0.0)
            self.drafts[i] += 1
            ok = 0
            for j, tok in enumerate(d.token_ids):
                self.pp[i][j + 1] += d.probs[j]
                if ok == j and tok == own[t + j]:
                    ok += 1
            for j in range(1, ok + 1):
                self.hits[i][j] += 1

    def table(self, model: SiblingModel | None) -> AcceptanceTable:
        n = [max(d, 1) for d in self.drafts]
        accept = [[1.0] + [h / n[i] for h in self.hits[i][1:]] for i in range(len(self.refs))]
        probs = [[0.0] + [p / n[i] for p in self.pp[i][1:]] for i in range(len(self.refs))]
        return AcceptanceTable(self.refs, self.g_max, accept, probs, model)


@lru_cache(maxsize=8)
def measure_acceptance(model: SiblingModel | None = None, g_max: int = 8) -> AcceptanceTable:
    """Run real suffix trees over the model's sibling streams (about a second)."""
    m = model or SiblingModel()
    rng = random.Random(m.seed)
    tally = _Tally(REFS, g_max)
    for _ in range(m.num_groups):
        ref = _reference(m, rng)
        siblings = [_sibling(ref, m, rng) for _ in range(max(REFS) + 1)]
        for i, k in enumerate(REFS):
            tally.run(i, siblings[0], siblings[1 : k + 1], m.sample_every)
    return tally.table(m)


@lru_cache(maxsize=8)
def measure_history_acceptance(
    model: SiblingModel | None = None,
    g_max: int = 8,
    *,
    history: int = 8,
    recurrence: float = RHYME_TOKEN_RECURRENCE,
) -> AcceptanceTable:
    """The acceptance table with the previous epoch's responses to the same prompt in each
    group's tree: the project's ``DraftStore`` with ``keep_history`` (the live object) keeps
    ``history`` responses of an earlier group of the prompt and opens the new group with
    them. The earlier responses are siblings of the earlier epoch's reference stream, which
    is this epoch's with each token kept with probability ``recurrence`` (else a fresh
    token): RhymeRL's token recurrence. Rows by sibling references ahead, as
    ``measure_acceptance``; every row also drafts from the history."""
    m = model or SiblingModel()
    rng = random.Random(m.seed + 1)
    tally = _Tally(REFS, g_max)
    for n in range(m.num_groups):
        ref = _reference(m, rng)
        old_ref = [t if rng.random() < recurrence else rng.randrange(m.vocab) for t in ref]
        old = [_sibling(old_ref, m, rng) for _ in range(history)]
        siblings = [_sibling(ref, m, rng) for _ in range(max(REFS) + 1)]
        for i, k in enumerate(REFS):
            store = DraftStore(keep_history=True, history_size=history)
            prompt = f"p{n}"
            store.open_groups("before", [GroupInfo(group_id="old", prompt_id=prompt, size=1)])
            for j, stream in enumerate(old):
                store.append(
                    TokenAppend(
                        group_id="old",
                        request_id=f"r{j}",
                        chunk_seq=1,
                        start=0,
                        token_ids=tuple(stream),
                    )
                )
            store.close_groups(["old"])
            store.open_groups("now", [GroupInfo(group_id="new", prompt_id=prompt, size=1)])
            tree = store.tree("new")
            tally.run(i, siblings[0], siblings[1 : k + 1], m.sample_every, tree)
    return tally.table(m)


def acceptance_from_streams(
    groups: Sequence[Sequence[Sequence[int]]], g_max: int = 8, sample_every: int = 3
) -> AcceptanceTable:
    """The same measurement over recorded output: ``groups`` holds each group's siblings'
    token streams (a rollout's samples). Every sibling in turn drafts from a tree holding
    ``k`` of its siblings' streams and its own so far, for every ``k`` the group size
    allows (``refs``: 0 .. the largest group size - 1), so the table is what grouped
    drafting found in that text, by how many siblings were ahead."""
    size = max((len(g) for g in groups), default=1)
    refs = tuple(range(size))
    tally = _Tally(refs, g_max)
    for group in groups:
        streams = [list(s) for s in group]
        for o, own in enumerate(streams):
            others = streams[o + 1 :] + streams[:o]
            for i, k in enumerate(refs):
                if k <= len(others):
                    tally.run(i, own, others[:k], sample_every)
    if not any(tally.drafts):
        raise ValueError("acceptance_from_streams: no stream is longer than g_max tokens")
    return tally.table(None)
