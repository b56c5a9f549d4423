from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tests.pipeline.toytask  # noqa: F401  (registers the say7 task)
from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.rl.config import RUN_TRAINER, RunConfig
from pipeline.rl.loop import train
from pipeline.rl.report import load_rows

pytestmark = pytest.mark.anyio

TINY = GeneratorOptions(
    model=ModelOptions(
        hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64, max_context=64
    ),
    max_batch=16,
    kv_budget_tokens=4096,
)


def toy_config(tmp_path: Path, **kw: object) -> RunConfig:
    base = RunConfig(
        task="say7",
        iterations=1,
        prompts_per_iteration=4,
        group_size=4,
        max_new_tokens=6,
        generator=TINY,
        warm_start_steps=0,
        trainer=dataclasses.replace(RUN_TRAINER, lr=3e-2),
        seed=3,
        out_dir=str(tmp_path / "run"),
        checkpoint_every=0,
        num_generators=2,
        eval_prompts=64,  # the job's 256 held-out prompts x 4 would dwarf a toy iteration
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


async def test_one_full_iteration_over_real_processes(tmp_path: Path) -> None:
    rows = await train(toy_config(tmp_path))
    [row] = rows
    assert row["weight_version"] == 1 and row["output_tokens"] > 0
    assert load_rows(tmp_path / "run" / "metrics.jsonl") == rows
    for key in (
        "iteration",
        "reward_mean",
        "rollout_s",
        "train_s",
        "throughput_tok_s",
        "tail_s",
        "weight_version",
    ):
        assert key in row
    assert (tmp_path / "run" / "last-rollout" / "timeline.png").exists()
    # context-aware (the default policy) orders by an estimate; its error is in the row
    assert row["policy"] == "context_aware" and row["estimate_error"] >= 0.0
    # the last iteration scores the held-out prompts: mean reward and success rate (reward 1),
    # before training and now; rewards lie in [0, 1], so success can never exceed the mean
    for when in ("", "_before"):
        reward, success = row[f"eval_reward{when}"], row[f"eval_success{when}"]
        assert 0.0 <= success <= reward <= 1.0


@pytest.mark.slow
async def test_reward_rises_and_resume_continues_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 16 iterations over three runs: no timeline drawn after each (the test above checks it)
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    # no held-out scoring: it is checked above, and here it was most of the three runs' work
    cfg = toy_config(
        tmp_path, iterations=8, mode="inprocess", prompts_per_iteration=8, eval_prompts=0
    )
    rows = await train(cfg)
    rewards = [r["reward_mean"] for r in rows]
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards
    first = dataclasses.replace(
        cfg, iterations=4, checkpoint_every=4, out_dir=str(tmp_path / "first")
    )
    await train(first)  # checkpoint after iteration 3
    resumed = await train(
        dataclasses.replace(
            cfg, out_dir=str(tmp_path / "second"), resume=str(tmp_path / "first" / "checkpoint")
        )
    )
    assert [r["iteration"] for r in resumed] == [4, 5, 6, 7]
    keys = ("reward_mean", "output_tokens", "weight_version")
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in rows[4:]]
