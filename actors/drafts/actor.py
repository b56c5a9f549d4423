"""DraftTreeStoreActor: Seer's draft-tree store (DGDS) as an actor around `DraftStore`.

Consumes `GroupsOpened` (splitter: the groups of a rollout and their prompt tails),
`TokensAppended` (generators, one-way, batched), `SyncDrafts` (generators, a call: answered
with `DraftDeltas`, only what the caller lacks) and `GroupsClosed` (scheduler: free the
trees, or keep them as history for the same prompts with `keep_history`). A refused append
(gap, stale writer, closed group) is counted and logged at debug level; it never fails the
batch it came in. The store holds no request state beyond tokens: losing it costs drafts,
never samples (generators decode without drafts until it answers again).
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.base import Actor, ActorContext, Handler
from actors.drafts.options import DraftStoreOptions
from actors.drafts.store import DraftStore
from actors.drafts.suffix_tree import SUFFIX_TREE_IMPL
from transport.messages import (
    DraftDeltas,
    GroupsClosed,
    GroupsOpened,
    Message,
    SyncDrafts,
    TokensAppended,
)


class DraftTreeStoreActor(Actor):
    role = "drafts"
    Options = DraftStoreOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        opts: DraftStoreOptions = ctx.options or DraftStoreOptions()
        self.store = DraftStore(
            max_depth=opts.max_depth,
            keep_history=opts.keep_history,
            history_size=opts.history_size,
        )

    async def on_start(self) -> None:
        self.log.info("suffix_tree_core", impl=SUFFIX_TREE_IMPL)

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            GroupsOpened: self.handle_groups_opened,
            TokensAppended: self.handle_tokens_appended,
            SyncDrafts: self.handle_sync_drafts,
            GroupsClosed: self.handle_groups_closed,
        }

    def counters(self) -> dict[str, float]:
        return {**self.store.counters, "open_groups": len(self.store.groups)}

    async def handle_groups_opened(self, msg: GroupsOpened) -> None:
        self.store.open_groups(msg.rollout_id, msg.groups)

    async def handle_tokens_appended(self, msg: TokensAppended) -> None:
        for a in msg.appends:
            outcome = self.store.append(a)
            if outcome in ("gap", "stale"):
                self.log.debug(
                    "append_refused", outcome=outcome, request=a.request_id, start=a.start
                )

    async def handle_sync_drafts(self, msg: SyncDrafts) -> DraftDeltas:
        return self.store.sync(msg)

    async def handle_groups_closed(self, msg: GroupsClosed) -> None:
        self.store.close_groups(msg.group_ids)
