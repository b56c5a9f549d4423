"""LengthEstimatorActor: the async shell around the pure `LengthEstimator`.

Consumes `GroupsOpened` (splitter) and `RequestFinished` (scheduler). Emits
`EstimateUpdated` to the scheduler whenever a group's estimate changes (the longest
finished sibling so far), with the running average context length (for a parallelism
selector, planned). With `use_prior`, a group whose prompt finished before starts at that
prompt's longest output: the estimate is sent when the group opens (the scheduler keeps
estimates that arrive before their rollout's requests). A finished request of an unknown
group is logged and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

from actors.base import Actor, ActorContext, Handler
from actors.estimator.core import LengthEstimator
from actors.estimator.options import EstimatorOptions
from transport.messages import EstimateUpdated, GroupsOpened, Message, RequestFinished


class LengthEstimatorActor(Actor):
    role = "estimator"
    Options = EstimatorOptions

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.opts: EstimatorOptions = ctx.options or EstimatorOptions()
        self.core: LengthEstimator | None = None
        self.open: dict[str, int] = {}  # group id -> requests not yet finished

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {
            GroupsOpened: self.handle_groups_opened,
            RequestFinished: self.handle_request_finished,
        }

    async def handle_groups_opened(self, msg: GroupsOpened) -> None:
        if self.core is None:
            self.core = LengthEstimator(
                msg.generation_limit,
                use_prior=self.opts.use_prior,
                prior_rule=self.opts.prior_rule,
            )
        for group in msg.groups:
            self.core.open_group(group.group_id, group.prompt_id, group.size)
            self.open[group.group_id] = group.size
            start = self.core.estimate(group.group_id)
            if start != msg.generation_limit:  # a prior (use_prior): tell the scheduler now
                update = EstimateUpdated(
                    rollout_id=msg.rollout_id,
                    group_id=group.group_id,
                    estimate=start,
                )
                await self.send_to("scheduler", 0, update)

    async def handle_request_finished(self, msg: RequestFinished) -> None:
        if self.core is None or msg.group_id not in self.open:
            self.log.warning("unknown_group", group=msg.group_id, request=msg.request_id)
            return
        estimate = self.core.on_request_finished(msg.group_id, msg.output_len)
        self.open[msg.group_id] -= 1
        if not self.open[msg.group_id]:
            del self.open[msg.group_id]
            self.core.close_group(msg.group_id)
        if estimate is not None:
            update = EstimateUpdated(
                rollout_id=msg.rollout_id,
                group_id=msg.group_id,
                estimate=estimate,
            )
            await self.send_to("scheduler", 0, update)
