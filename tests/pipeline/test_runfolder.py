"""A `seer run` folder: the resolved config saved in it, the last K checkpoints kept, and
`--resume RUN_FOLDER` continuing there (units on plain folders; one real run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.pipeline.toytask  # noqa: F401  (registers the say7 task)
from pipeline.cli.main import build_parser
from pipeline.cli.run import run_config
from pipeline.config import ConfigError
from pipeline.records.report import results_table
from pipeline.rl.config import RunConfig, rl_topology
from pipeline.rl.report import load_rows, plot_rewards, summary_table
from pipeline.rl.runfolder import (
    checkpoints,
    config_toml,
    keep_rows_before,
    latest_checkpoint,
    load_run_config,
    make_room,
    resume_from,
    save_run_config,
)
from tests.pipeline.test_rl_loop import toy_config


def fake_checkpoint(folder: Path, iteration: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"iteration": iteration}))
    return folder


def test_the_saved_config_reads_back_equal(tmp_path: Path) -> None:
    cfg = toy_config(tmp_path, keep_checkpoints=3, hosts={}, policy="divided")
    assert load_run_config(save_run_config(cfg, tmp_path / "run")) == cfg
    assert 'policy = "divided"' in config_toml(cfg)
    with pytest.raises(ConfigError, match="config file not found"):
        load_run_config(tmp_path / "none.toml")


def test_make_room_keeps_the_last_k(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for it in range(5):  # what the loop does before each save: make room, then save
        make_room(run, keep=3)
        fake_checkpoint(run / "checkpoint", it)
    assert [(i, p.name) for i, p in checkpoints(run)] == [
        (2, "checkpoint-000002"), (3, "checkpoint-000003"), (4, "checkpoint")
    ]  # fmt: skip
    assert latest_checkpoint(run) == run / "checkpoint"
    make_room(run, keep=1)  # fewer kept now: only the latest stays
    fake_checkpoint(run / "checkpoint-000005", 5)  # a save that failed after the move
    assert [p.name for _, p in checkpoints(run)] == ["checkpoint", "checkpoint-000005"]
    assert latest_checkpoint(run) == run / "checkpoint-000005"
    with pytest.raises(ValueError, match="keep_checkpoints must be >= 1"):
        make_room(run, keep=0)
    with pytest.raises(ValueError, match="keep_checkpoints must be >= 1"):
        RunConfig(keep_checkpoints=0)


def test_resume_resolves_a_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    save_run_config(toy_config(tmp_path, iterations=4, out_dir=str(run)), run)
    with pytest.raises(ConfigError, match="no checkpoint in it"):
        resume_from(run)
    fake_checkpoint(run / "checkpoint-000001", 1)
    fake_checkpoint(run / "checkpoint", 3)
    parse = build_parser().parse_args
    cfg = run_config(parse(["run", "--resume", str(run), "--iterations", "8", "--set", "seed=4"]))
    assert (cfg.out_dir, cfg.resume) == (str(run), str(run / "checkpoint"))
    assert (cfg.iterations, cfg.seed, cfg.task) == (8, 4, "say7")  # saved config, then changes
    with pytest.raises(ConfigError, match="leave out --config"):
        run_config(parse(["run", "--resume", str(run), "--config", "x.toml"]))
    with pytest.raises(ConfigError, match="not a run folder"):
        resume_from(tmp_path)
    # a checkpoint folder: the old meaning, a new run folder from this command's config
    cfg = run_config(parse(["run", "--resume", str(run / "checkpoint"), "--out", "new"]))
    assert (cfg.resume, cfg.out_dir, cfg.task) == (str(run / "checkpoint"), "new", "countdown")


def test_resumed_metrics_drop_the_rows_run_again(tmp_path: Path) -> None:
    rows = [{"iteration": i} for i in range(6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    keep_rows_before(tmp_path, 4)
    assert load_rows(tmp_path / "metrics.jsonl") == rows[:4]
    with pytest.raises(FileNotFoundError, match="no metrics"):
        load_rows(tmp_path / "none.jsonl")


def test_report_helpers_on_empty_and_partial_rows(tmp_path: Path) -> None:
    from rich.console import Console

    console = Console(width=100, record=True)
    console.print(summary_table([], "0 iterations"))
    console.print(summary_table([{"reward_mean": 0.5}, {"reward_mean": 1.0}], "2"))
    text = console.export_text()
    assert "no iterations ran" in text
    assert "0.5" in text and "tok/s" in text  # a figure no row has is "-", not 0
    assert plot_rewards([], tmp_path / "r.png").stat().st_size > 0
    console.print(results_table("empty", ["a", "b"]))
    assert "no results" in " ".join(console.export_text().split())
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        results_table("t", ["a", "b"], [["x"]])


def test_the_actors_log_in_the_run_folder(tmp_path: Path) -> None:
    cfg = toy_config(tmp_path)
    assert rl_topology(cfg, "").log_folder() == (tmp_path / "run" / "logs").absolute()
