"""A real `seer run` over the multi-turn guess task (real processes and sockets, a tiny
model): the plumbing from the warm start on masked trajectories to episodes' metrics."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from pipeline.config import build_options
from pipeline.rl.config import RUN_TRAINER, RunConfig, rl_topology
from pipeline.rl.loop import train
from pipeline.tasks import TaskError, get_task

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TINY = GeneratorOptions(
    model=ModelOptions(
        hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64, max_context=64
    ),
    max_batch=32,
    kv_budget_tokens=4096,
)


def guess_config(tmp_path: Path, **kw: object) -> RunConfig:
    base = RunConfig(
        task="guess", iterations=2, prompts_per_iteration=4, group_size=4, max_new_tokens=24,
        generator=TINY, warm_start_steps=2, cache_dir=str(tmp_path / "cache"),
        trainer=dataclasses.replace(RUN_TRAINER, micro_batch_size=16, mini_batch_size=16),
        out_dir=str(tmp_path / "run"), checkpoint_every=0, num_generators=1, eval_prompts=4,
        eval_samples=2, eval_every=1, seed=5,
    )  # fmt: skip
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


async def test_seer_run_trains_on_guess_episodes(tmp_path: Path) -> None:
    rows = await train(guess_config(tmp_path))
    assert [r["iteration"] for r in rows] == [0, 1] and rows[-1]["weight_version"] == 2
    assert list((tmp_path / "cache").glob("guess-*.safetensors"))  # the warm start ran
    for row in rows:
        ends = row["episode_ends"]
        assert sum(ends.values()) == 16 and set(ends) <= {"done", "max_turns"}
        assert 1 <= row["mean_turns"] <= row["max_turns_taken"] <= 5
        assert row["success_rate"] == ends.get("done", 0) / 16  # success: the number found
        assert row["num_error_samples"] == 0 and row["train_num_samples"] == 16
        for when in ("", "_before"):
            assert 1 <= row[f"eval_mean_turns{when}"] <= 5
            assert 0 <= row[f"eval_reward{when}"] <= row[f"eval_success{when}"] <= 1


async def test_the_example_config_runs_guess_with_environment_actors(tmp_path: Path) -> None:
    path = ROOT / "examples" / "multiturn.toml"
    cfg = build_options(RunConfig, tomllib.loads(path.read_text()), str(path))
    assert cfg.task == "guess" and cfg.warm_start_steps > 0 and cfg.eval_prompts > 0
    roles = [g.role for g in rl_topology(cfg, "", get_task("guess")).topology.actors]
    assert roles.count("environment") == cfg.num_environments == 1
    countdown = rl_topology(dataclasses.replace(cfg, task="countdown"), "")
    assert "environment" not in [g.role for g in countdown.topology.actors]
    with pytest.raises(TaskError, match="max_new_tokens 8 is less than"):
        await train(guess_config(tmp_path, max_new_tokens=8))  # before any actor starts
    with pytest.raises(ValueError, match="num_environments must be >= 1"):
        guess_config(tmp_path, num_environments=0)
