"""RequestSplitter: a prompt batch becomes groups of single-sample requests.

Consumes `PromptBatch` (driver). Emits `GroupsOpened` to the length estimator (and the
draft store, when the topology has one) first, then one `RequestsAdded` with every request
to the scheduler. The estimator and the store are best-effort peers: their messages are
dropped (and counted) when their queue is full, so a dead one never blocks a rollout.
The splitting itself is `actors.splitter.core.split`. Bad batches are refused with a
`ValueError` (the caller of a `call` gets it as a `RemoteError`) and nothing is emitted.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.base import Actor, Handler
from actors.splitter.core import split
from transport.messages import GroupsOpened, Message, PromptBatch, RequestsAdded


class RequestSplitter(Actor):
    role = "splitter"

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {PromptBatch: self.handle_prompt_batch}

    async def handle_prompt_batch(self, msg: PromptBatch) -> None:
        groups, requests = split(msg)
        opened = GroupsOpened(
            rollout_id=msg.rollout_id, groups=groups, generation_limit=msg.sampling.max_new_tokens
        )
        self.offer("estimator", 0, opened)  # best-effort peers: never block the rollout
        if self.has_peer("drafts"):
            self.offer("drafts", 0, opened)
        added = RequestsAdded(
            rollout_id=msg.rollout_id,
            requests=requests,
            policy=msg.policy,
            sticky_turns=msg.sticky_turns,
        )
        await self.send_to("scheduler", 0, added)
        self.log.info(
            "batch_split", rollout=msg.rollout_id, groups=len(groups), requests=len(requests)
        )
