from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import tests.pipeline.toytask  # noqa: F401  (registers the say7 task)
from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.records.sinks import scalar_tags
from pipeline.rl.config import RUN_TRAINER, RunConfig
from pipeline.rl.loop import train
from pipeline.rl.report import load_rows
from pipeline.rl.runfolder import checkpoints, load_run_config, resume_from
from tests.pipeline import wandb_files

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
    cfg = toy_config(tmp_path, report_to=("tensorboard", "wandb"), log_samples_every=1)
    rows = await train(cfg)
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
    # the run folder holds the resolved config and the actors' logs
    assert load_run_config(tmp_path / "run" / "config.toml") == cfg
    logs = {p.name for p in (tmp_path / "run" / "logs").iterdir()}
    assert {"generator-0.log", "generator-1.log", "scheduler-0.log", "trainer-0.log"} <= logs
    # context-aware (the default policy) orders by an estimate; its error is in the row
    assert row["policy"] == "context_aware" and row["estimate_error"] >= 0.0
    # the last iteration scores the held-out prompts: mean reward and success rate (reward 1),
    # before training and now; rewards lie in [0, 1], so success can never exceed the mean
    for when in ("", "_before"):
        reward, success = row[f"eval_reward{when}"], row[f"eval_success{when}"]
        assert 0.0 <= success <= reward <= 1.0
    check_tracked(tmp_path / "run", row)


def check_tracked(folder: Path, row: dict[str, Any]) -> None:
    """The run's trackers hold its row (step 1: one iteration done), the held-out score
    before RL (step 0) and a table of rendered samples; the same table in samples.jsonl."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    assert set(scalar_tags(row)) <= set(events.Tags()["scalars"])
    for key in ("reward_mean", "eval_reward", "train_loss", "mean_accept_len", "num_chunks"):
        assert key in row
    reward = [(e.step, e.value) for e in events.Scalars("reward/reward_mean")]
    assert reward == [(1, pytest.approx(row["reward_mean"]))]
    evals = [(e.step, e.value) for e in events.Scalars("eval/eval_reward")]
    assert evals == [
        (0, pytest.approx(row["eval_reward_before"])),
        (1, pytest.approx(row["eval_reward"])),
    ]
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and {s["step"] for s in samples} == {1}  # one per prompt
    [text] = events.Tensors("samples/text_summary")
    assert samples[0]["text"] in text.tensor_proto.string_val[0].decode()
    history = wandb_files.history(folder)
    assert [h["_step"] for h in history] == [0, 1]
    assert history[1]["rollout/throughput_tok_s"] == pytest.approx(row["throughput_tok_s"])
    assert history[1]["samples/nrows"] == 4


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
        cfg, iterations=4, checkpoint_every=2, keep_checkpoints=2, out_dir=str(tmp_path / "first")
    )
    await train(first)  # checkpoints after iterations 1 and 3
    # `seer run --resume FOLDER`: its saved config and latest checkpoint, in the same folder
    saved, checkpoint = resume_from(tmp_path / "first")
    assert saved == first and checkpoint == tmp_path / "first" / "checkpoint"
    resumed = await train(dataclasses.replace(saved, iterations=8, resume=str(checkpoint)))
    assert [r["iteration"] for r in resumed] == [4, 5, 6, 7]
    keys = ("reward_mean", "output_tokens", "weight_version")
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in rows[4:]]
    assert load_rows(tmp_path / "first" / "metrics.jsonl")[4:] == resumed
    assert [i for i, _ in checkpoints(tmp_path / "first")] == [5, 7]  # the last two kept
