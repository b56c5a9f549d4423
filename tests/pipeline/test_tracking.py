"""Experiment tracking (`RunConfig.report_to`): the rows' scalars and their tags, both sinks
reading back the files they wrote (TensorBoard's EventAccumulator, the wandb offline run
file), the sample table, and the typed errors for an unknown or missing sink."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import ConfigError, build_options
from pipeline.records.sinks import SinkUnavailableError, check_sinks, open_tracker, scalar_tags
from pipeline.rl.config import RunConfig
from pipeline.rl.tracking import SAMPLE_COLUMNS, is_sample_iteration, sample_rows
from pipeline.rollout.api import Group
from pipeline.tasks import get_task
from tests.pipeline import wandb_files
from transport.messages import SampleResult

ROW = {
    "iteration": 4,
    "reward_mean": 0.5,
    "success_rate": 0.25,
    "rollout_s": 1.5,
    "train_s": 0.5,
    "tail_s": 0.3,
    "mean_accept_len": 1.8,
    "queueing_delay_s": {"chunk_mean": 0.01, "chunk_p90": 0.02},
    "train_loss": -0.1,
    "train_logprob_gap_max": float("nan"),
    "eval_reward": 0.6,
    "eval_reward_before": 0.4,
    "weight_version": 5,
    "samples_per_rank": [10, 12],
    "policy": "context_aware",
    "is_flag": True,
}


def test_a_row_becomes_grouped_scalars_under_its_own_keys() -> None:
    assert scalar_tags(ROW) == {
        "reward/reward_mean": 0.5,
        "reward/success_rate": 0.25,
        "rollout/rollout_s": 1.5,
        "train/train_s": 0.5,
        "rollout/tail_s": 0.3,
        "rollout/mean_accept_len": 1.8,
        "rollout/queueing_delay_s/chunk_mean": 0.01,
        "rollout/queueing_delay_s/chunk_p90": 0.02,
        "train/train_loss": -0.1,
        "eval/eval_reward": 0.6,
        "run/weight_version": 5.0,
        "run/samples_per_rank/0": 10.0,
        "run/samples_per_rank/1": 12.0,
    }  # no iteration (the step), no strings, booleans or NaN, no score before RL


def test_tensorboard_and_wandb_read_back_what_was_logged(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = open_tracker(("tensorboard", "wandb"), tmp_path, {"lr": 1e-3}, run_name="t")
    with tracker:
        tracker.log_row({"eval_reward": 0.4}, step=0)
        tracker.log_row(ROW)
        tracker.log_table(5, "samples", ("prompt_id", "text"), [["p1", "a | b"], ["p2", "c"]])
        tracker.log_table(6, "samples", ("prompt_id", "text"), [])  # nothing to log

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert set(scalar_tags(ROW)) <= set(scalars)
    got = [(e.step, e.value) for e in events.Scalars("eval/eval_reward")]
    assert got == [(0, pytest.approx(0.4)), (5, pytest.approx(0.6))]  # step: iterations done
    [text] = events.Tensors("samples/text_summary")
    assert text.step == 5 and b"| p1 | a \\| b |" in text.tensor_proto.string_val[0]
    assert b"lr" in events.Tensors("config/text_summary")[0].tensor_proto.string_val[0]

    rows = wandb_files.history(tmp_path)
    assert [r["_step"] for r in rows] == [0, 5]  # a step's row and table are one history row
    assert rows[0]["eval/eval_reward"] == 0.4
    assert rows[1]["reward/reward_mean"] == 0.5 and rows[1]["train/train_loss"] == -0.1
    assert rows[1]["samples/_type"] == "table-file" and rows[1]["samples/nrows"] == 2
    table = json.loads((wandb_files.offline_run(tmp_path) / "files" / rows[1]["samples/path"])
                       .read_text())  # fmt: skip
    assert table["columns"] == ["prompt_id", "text"] and table["data"][1] == ["p2", "c"]
    assert wandb_files.config(tmp_path)["lr"] == 1e-3
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 5, "prompt_id": "p1", "text": "a | b"},
        {"step": 5, "prompt_id": "p2", "text": "c"},
    ]


def test_an_unknown_or_missing_sink_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"report_to: unknown sinks \['tensorbord'\]"):
        RunConfig(report_to=("tensorbord",))
    with pytest.raises(ConfigError, match="report_to must be a list"):
        RunConfig(report_to="wandb")  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(SinkUnavailableError, match=r"pip install 'seer-rl\[wandb\]'"):
        check_sinks(RunConfig(report_to=("wandb",)).report_to)
    with pytest.raises(SinkUnavailableError, match="'wandb' needs the wandb package"):
        open_tracker(("tensorboard", "wandb"), tmp_path, {})
    assert not (tmp_path / "tensorboard").exists()  # checked before any sink starts


def test_report_to_from_toml_and_flags() -> None:
    from pipeline.cli.main import build_parser
    from pipeline.cli.run import run_config

    cfg = build_options(RunConfig, {"report_to": ["wandb"], "log_samples_every": 2}, "run.toml")
    assert cfg.report_to == ("wandb",)
    assert [is_sample_iteration(cfg, it) for it in range(4)] == [False, True, False, True]
    with pytest.raises(ConfigError, match=r"run.toml.report_to\[0\]: expected str"):
        build_options(RunConfig, {"report_to": [1]}, "run.toml")

    def flags(*argv: str) -> tuple[str, ...]:
        args: argparse.Namespace = build_parser().parse_args(["run", *argv])
        return run_config(args).report_to

    assert flags() == ()
    assert flags("--report-to", "tensorboard,wandb") == ("tensorboard", "wandb")
    assert flags("--report-to", "wandb", "--report-to", "tensorboard") == ("wandb", "tensorboard")
    assert flags("--report-to", "none") == ()
    with pytest.raises(ConfigError, match="unknown sinks"):
        flags("--report-to", "mlflow")


def test_sample_rows_render_sample_zero_of_the_first_prompts() -> None:
    task = get_task("countdown")
    prompts = task.sample_prompts(3, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    groups = [
        Group(p.prompt_id, tuple(_sample(p.prompt_id, i, task.sft_example(p, rng)) for i in (0, 1)))
        for p in prompts
    ]
    rewards = [1.0, 0.0, 0.5, 1.0, 0.25, 0.0]  # prompt, then sample
    rows = sample_rows(task, prompts, groups, rewards, iteration=7, num_rows=2)
    assert [r[:3] for r in rows] == [[7, prompts[0].prompt_id, 1.0], [7, prompts[1].prompt_id, 0.5]]
    first = [int(t) for t in groups[0].samples[0].token_ids]
    assert rows[0][SAMPLE_COLUMNS.index("text")] == task.render(prompts[0], first)
    assert rows[0][SAMPLE_COLUMNS.index("output_len")] == len(first)
    streamed = [Group(g.prompt_id, (_sample(g.prompt_id, 0, []),)) for g in groups]
    assert sample_rows(task, prompts, streamed, rewards[::2], iteration=7, num_rows=2) == []


def _sample(prompt_id: str, index: int, tokens: list[int]) -> SampleResult:
    return SampleResult(
        request_id=f"{prompt_id}/{index}", group_id=prompt_id, prompt_id=prompt_id, index=index,
        token_ids=np.asarray(tokens, dtype=np.int32), logprobs=np.zeros(len(tokens), np.float32),
        finish_reason="stop", weight_versions=(0,), start_s=0.0, end_s=1.0,
    )  # fmt: skip
