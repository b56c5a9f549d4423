"""Length estimators studied in the simulator where there is no history (epoch 1).

``ExtrapolatingEstimator`` uses only what Seer's estimator sees -- the lengths of a group's
finished siblings, in the order they finish, and how many of the group have finished -- and
corrects the longest finished sibling for what is still running: it learns, from the groups
of this rollout that have closed, the mean log ratio of a group's longest output to its
longest after k siblings had finished, and scales the longest finished sibling by it (capped
at the generation limit). Until ``min_groups`` groups have closed with k finished it is
Seer's estimate. It is a subclass of the live ``LengthEstimator`` (priors work as there);
`seer sim seer --epochs` reports its fraction of the oracle (``ca_extrapolated``).
"""

from __future__ import annotations

import math

from actors.estimator.core import LengthEstimator

__all__ = ["ExtrapolatingEstimator"]


class ExtrapolatingEstimator(LengthEstimator):
    def __init__(self, generation_limit: int, *, min_groups: int = 8) -> None:
        super().__init__(generation_limit)
        if min_groups < 1:
            raise ValueError(f"min_groups must be >= 1, got {min_groups}")
        self.min_groups = min_groups
        self._finished: dict[str, list[int]] = {}  # group -> its finished lengths, in order
        self._log_ratio: dict[int, tuple[float, int]] = {}  # k -> (sum, groups)

    def open_group(self, group_id: str, prompt_id: str, group_size: int) -> None:
        super().open_group(group_id, prompt_id, group_size)
        self._finished[group_id] = []

    def on_request_finished(self, group_id: str, output_len: int) -> int | None:
        before = self.estimate(group_id)
        super().on_request_finished(group_id, output_len)
        self._finished[group_id].append(output_len)
        after = self.estimate(group_id)
        return after if after != before else None

    def factor(self, k: int) -> float:
        """How much longer a group's longest output was than its longest after ``k``
        finished siblings, over this rollout's closed groups (1.0 until ``min_groups``)."""
        total, n = self._log_ratio.get(k, (0.0, 0))
        return math.exp(total / n) if n >= self.min_groups else 1.0

    def estimate(self, group_id: str) -> int:
        base = super().estimate(group_id)
        done = self._finished.get(group_id, [])
        if not done:
            return base
        return min(self.generation_limit, round(max(done) * self.factor(len(done))))

    def close_group(self, group_id: str) -> None:
        done = self._finished.pop(group_id)
        super().close_group(group_id)
        if not done or max(done) <= 0:
            return
        longest = max(done)
        running = 0
        for k, n in enumerate(done[:-1], start=1):
            running = max(running, n)
            total, count = self._log_ratio.get(k, (0.0, 0))
            self._log_ratio[k] = (total + math.log(longest / max(running, 1)), count + 1)
