"""The draft-tree store's options, and the speculation settings a generator takes (its
`spec` sub-table), which drive the replicas and the draft policy of this package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from actors.options import ConfigError, check_positive


@dataclass(frozen=True, kw_only=True)
class DraftStoreOptions:
    """`max_depth`: the depth limit of each group's suffix tree, in tokens. `keep_history`:
    when a group closes, keep its responses for the next group of the same prompt (the next
    iteration) instead of freeing its tree. `history_size`: with `keep_history`, at most
    this many earlier responses kept per prompt."""

    max_depth: int = 64
    keep_history: bool = False
    history_size: int = 16

    def __post_init__(self) -> None:
        check_positive(self, "max_depth", "history_size")


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """`mode`: "off", "self" (each request drafts from its own output: SuffixDecoding) or
    "group" (from all siblings via the draft store: Seer). `budget`: "adaptive" (MBA) or
    "fixed" (`fixed_len` tokens for every request). `fixed_len`: the draft length of the
    fixed budget. `g_max`: at most this many draft nodes per request per step.
    `probe_weight`: how much more a probe's accepted token counts in the adaptive budget
    (Seer's lambda). `explore_every`: after this many steps without drafts, draft a few
    nodes anyway so acceptance stays measured. `paths`: paths of a multi-path draft tree.
    `multipath_max_batch`: draft trees of `paths` paths only while at most this many
    requests run (the tail); chains otherwise. `min_prob`: leave out draft nodes whose path
    probability is below this. `max_match`: the longest suffix of a request's tokens
    matched in the tree. `tree_depth`: the depth limit of the generator's local tree
    replicas. `sync_interval_s`: how often replicas sync with the draft store.
    `store_timeout_s`: how long a sync may wait for the store (then: no drafts, never a
    stall)."""

    mode: Literal["off", "self", "group"] = "group"
    budget: Literal["adaptive", "fixed"] = "adaptive"
    fixed_len: int = 4
    g_max: int = 8
    probe_weight: float = 2.0
    explore_every: int = 16
    paths: int = 4
    multipath_max_batch: int = 4
    min_prob: float = 0.1
    max_match: int = 32
    tree_depth: int = 64
    sync_interval_s: float = 0.05
    store_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if self.mode not in ("off", "self", "group"):
            raise ConfigError(f"speculation mode must be off, self or group, got {self.mode!r}")
        if self.budget not in ("adaptive", "fixed"):
            raise ConfigError(f"speculation budget must be adaptive or fixed, got {self.budget!r}")
        for name in ("fixed_len", "g_max", "explore_every", "paths", "max_match", "tree_depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"speculation {name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.min_prob <= 1:
            raise ConfigError(f"speculation min_prob must be in [0, 1], got {self.min_prob}")
        if self.probe_weight <= 0 or self.sync_interval_s <= 0 or self.store_timeout_s <= 0:
            raise ConfigError("probe_weight, sync_interval_s and store_timeout_s must be > 0")
        if self.max_match >= self.tree_depth:
            raise ConfigError("max_match must be below tree_depth (drafts need depth left)")
