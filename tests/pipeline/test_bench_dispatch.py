"""`seer bench dispatch` on its smallest setting: both paths and the floor measured in one
run, against the real trainer actor's receiving side, every rank holding its whole shard."""

from __future__ import annotations

import numpy as np
import pytest

from actors.dispatcher.core import DispatchPlan
from pipeline.bench.dispatch import GROUP_SIZE, make_workload, measure_ranks


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bench_dispatch_measures_both_paths_and_the_floor() -> None:
    rows = measure_ranks(2, (2048,), num_groups=2, repeats=2)
    row = rows["2048"]
    assert len(row["direct_runs_s"]) == len(row["centralized_runs_s"]) == 2
    assert len(row["floor_runs_s"]) == 2
    for key in ("direct_s", "centralized_s", "floor_s", "shard_build_s"):
        assert 0 < row[key] < 60, key
    assert row["ratio"] == pytest.approx(row["centralized_s"] / row["direct_s"])
    assert row["num_samples"] == 2 * GROUP_SIZE
    # the imbalance is the direct assignment's over the same workload
    samples, _ = make_workload(2048, 2, seed=2048 + 2)
    plan = DispatchPlan(2, GROUP_SIZE)
    for s in samples:
        plan.add(s.request_id, s.group_id, int(s.loss_mask.sum()), s.reward, False)
    assert row["imbalance"] == pytest.approx(max(plan.loads) / np.mean(plan.loads))
