"""A live layout switch: after the first iteration the selector's profile says another
generator layout is faster at this context length; the loop restarts the generators with
it, the trainer comes back at the same weight version and the next rollout trains on-policy
(the trainer refuses any sample of another version)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig
from pipeline.rl import layout_switch
from pipeline.rl.loop import train
from pipeline.rl.selector import Layout, LayoutProfile, ProfileRow
from pipeline.rollout import Rollout
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


@pytest.mark.timeout(300)
async def test_a_switch_restarts_only_the_generators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real processes: the switch replaces the generator processes (2 x 1 -> 1 x 2); the
    trainer, scheduler, splitter, estimator and draft store are the same processes after it,
    the trainer pushes its weights to the new generator under the same version and the next
    rollout trains on-policy."""
    rows = [ProfileRow(Layout(1, 2), ctx, 8, 200.0) for ctx in (16, 64)] + [
        ProfileRow(Layout(2, 1), ctx, 8, 100.0) for ctx in (16, 64)
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(LayoutProfile(rows).to_json()))
    pids: list[dict[tuple[str, int], int]] = []
    restart = layout_switch.restart_generators

    async def spy(rollout: Rollout, fresh: PipelineConfig) -> bool:
        assert rollout.cluster is not None
        pids.append({k: s.pid for k, s in rollout.cluster.status.items()})
        done = await restart(rollout, fresh)
        pids.append({k: s.pid for k, s in rollout.cluster.status.items()})
        return done

    monkeypatch.setattr(layout_switch, "restart_generators", spy)
    # no timeline drawn after each iteration (tests/pipeline/test_rl_loop.py checks it)
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    cfg = toy_config(
        tmp_path, iterations=2, layout_profile=str(profile), mode="local", eval_prompts=0
    )
    out = await train(cfg)
    assert [r["layout"] for r in out] == ["2x1", "1x2"]
    assert [r["weight_version"] for r in out] == [1, 2]
    assert all(r["train_num_samples"] == 16 for r in out)
    before, after = pids
    stayed = {k: pid for k, pid in before.items() if k[0] != "generator"}
    assert {"trainer", "scheduler", "splitter"} <= {role for role, _ in stayed}
    assert {k: after[k] for k in stayed} == stayed  # the same processes
    assert sorted(k for k in after if k[0] == "generator") == [("generator", 0)]
    assert after[("generator", 0)] not in before.values()  # a new generator process
