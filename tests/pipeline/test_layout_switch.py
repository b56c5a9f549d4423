"""A live layout switch: after the first iteration the selector's profile says another
generator layout is faster at this context length; the loop restarts the generators with
it, the trainer comes back at the same weight version and the next rollout trains on-policy
(the trainer refuses any sample of another version)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.run import train
from pipeline.selector import Layout, LayoutProfile, ProfileRow
from tests.pipeline.test_rl_loop import toy_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.timeout(200)
async def test_layout_switch_keeps_the_version_and_trains_on_policy(tmp_path: Path) -> None:
    rows = [  # 1 instance x 2 threads wins at every context: leave the starting 2 x 1
        ProfileRow(Layout(1, 2), ctx, 8, 200.0) for ctx in (16, 64)
    ] + [ProfileRow(Layout(2, 1), ctx, 8, 100.0) for ctx in (16, 64)]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(LayoutProfile(rows).to_json()))
    cfg = toy_config(
        tmp_path, iterations=3, layout_profile=str(profile), mode="inprocess", eval_prompts=0
    )
    out = await train(cfg)
    assert [r["layout"] for r in out] == ["2x1", "1x2", "1x2"]
    assert out[0]["layout_switch_s"] > 0 and "layout_switch_s" not in out[1]
    assert [r["num_layout_switches"] for r in out] == [1, 1, 1]
    assert [r["weight_version"] for r in out] == [1, 2, 3]  # continuous across the switch
    assert all(r["train_num_samples"] == 16 for r in out)  # every sample trained on-policy
