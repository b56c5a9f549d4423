"""The prompt curriculum: weights follow where groups disagree, and it resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.tasks import Countdown
from pipeline.tasks.curriculum import Curriculum

TASK = Countdown()


def test_countdown_buckets_prompts_by_log2_n() -> None:
    assert [TASK.difficulty(TASK.make_prompt(n, [])) for n in (4, 7, 8, 100, 255)] == [
        2,
        2,
        3,
        6,
        7,
    ]


def test_selection_favours_buckets_whose_groups_disagree() -> None:
    cur = Curriculum(TASK.difficulty, pool_factor=4)
    for _ in range(10):  # short walks always right, long ones always wrong, 32-63 half
        cur.update(
            [TASK.make_prompt(n, []) for n in (5, 10, 20, 40, 100, 200)],
            [1.0, 1.0, 1.0, 0.5, 0.0, 0.0],
        )
    assert cur.weight(2) == pytest.approx(cur.weight(7), abs=0.03)  # both nearly settled
    assert cur.weight(5) > 3 * cur.weight(2)
    rng = np.random.default_rng(0)
    picked = [TASK.difficulty(p) for p in cur.select(TASK.sample_prompts(4000, rng), 1000, rng)]
    share = np.mean([b == 5 for b in picked])
    base = np.mean([TASK.difficulty(p) == 5 for p in TASK.sample_prompts(4000, rng)])
    assert share > 2 * base  # the 32-63 bucket is over-sampled


def test_selection_is_deterministic_and_state_round_trips() -> None:
    cur = Curriculum(TASK.difficulty)
    cur.update(TASK.sample_prompts(20, np.random.default_rng(1)), [0.3] * 20)
    again = Curriculum(TASK.difficulty)
    again.load(cur.state())
    assert again.success == cur.success
    pool = TASK.sample_prompts(64, np.random.default_rng(2))
    a = cur.select(pool, 16, np.random.default_rng(3))
    b = again.select(pool, 16, np.random.default_rng(3))
    assert a == b and len({p.prompt_id for p in a}) <= 16
    with pytest.raises(ValueError, match="pool of 64"):
        cur.select(pool, 65, np.random.default_rng(3))
