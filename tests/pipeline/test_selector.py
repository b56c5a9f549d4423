"""The parallelism selector follows the profile: a synthetic profile whose best layout
changes with context length switches at the iteration where the running average enters
the other bucket, once, and back when it leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.rl.selector import (
    Layout,
    LayoutProfile,
    ParallelismSelector,
    ProfileError,
    ProfileRow,
    layouts_for,
)

WIDE, DEEP = Layout(4, 1), Layout(1, 4)


def synthetic() -> LayoutProfile:
    """4 x 1 wins at short contexts, 1 x 4 at long ones (as TP=4 vs TP=8 in Earl); 2 x 2 never."""
    tput = {
        128: {WIDE: 900.0, Layout(2, 2): 700.0, DEEP: 500.0},
        512: {WIDE: 600.0, Layout(2, 2): 550.0, DEEP: 400.0},
        2048: {WIDE: 200.0, Layout(2, 2): 230.0, DEEP: 260.0},
    }
    return LayoutProfile(
        ProfileRow(lay, ctx, 32, t) for ctx, row in tput.items() for lay, t in row.items()
    )


def test_choice_follows_the_profile() -> None:
    p = synthetic()
    assert p.choice() == {128: WIDE, 512: WIDE, 2048: DEEP}
    assert p.worst(128) == DEEP and p.worst(2048) == WIDE
    assert [p.bucket_of(x) for x in (1, 128, 129, 512, 600, 99999)] == [
        128,
        128,
        512,
        512,
        2048,
        2048,
    ]
    assert layouts_for(4) == [Layout(1, 4), Layout(2, 2), Layout(4, 1)]


def test_switches_at_the_iteration_the_average_enters_the_long_bucket() -> None:
    sel = ParallelismSelector(synthetic(), WIDE, window=64)
    lengths_per_iteration = [100, 300, 450, 700, 1500, 1800, 1900, 300, 200]
    decisions = []
    for ctx in lengths_per_iteration:
        sel.observe([ctx] * 32)  # 32 samples per iteration; window of two iterations
        decisions.append(sel.decide())
    # running averages 100, 200, 375, 575, 1100, 1650, 1850, 1100, 250: the fourth is the
    # first past 512 (bucket 2048, where 1 x 4 wins); the last is back in bucket 512
    assert decisions == [None, None, None, DEEP, None, None, None, None, WIDE]
    assert sel.num_switches == 2 and sel.current == WIDE


def test_profile_round_trips_and_bad_profiles_are_typed_errors(tmp_path: Path) -> None:
    p = synthetic()
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(p.to_json()))
    again = LayoutProfile.load(path)
    assert again.choice() == p.choice() and again.rows == p.rows
    with pytest.raises(ProfileError, match="misses"):
        LayoutProfile([ProfileRow(WIDE, 128, 1, 1.0), ProfileRow(DEEP, 512, 1, 1.0)])
    with pytest.raises(ProfileError):
        LayoutProfile([])
    with pytest.raises(ProfileError):
        Layout.parse("two-by-one")
    with pytest.raises(ProfileError, match="malformed"):
        LayoutProfile.from_json({"profile": [{"layout": "2x1"}]})
    with pytest.raises(ProfileError, match="other cores"):
        ParallelismSelector(p, Layout(1, 2))
    path.write_text("{")
    with pytest.raises(ProfileError, match="cannot read"):
        LayoutProfile.load(path)
