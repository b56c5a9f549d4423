"""What an RL run reports to its trackers (`RunConfig.report_to`), besides metrics.jsonl.

The loop opens one `Tracker` per run (`run_tracker`) and gives it every iteration's
metrics row, the held-out score before RL (at step 0: no iteration done) and, every
`log_samples_every` iterations, a table of sample completions rendered by the task
(`sample_rows`). The rows themselves are built by the loop; this module only chooses and
formats what goes out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.records.sinks import Tracker, open_tracker
from pipeline.rl.config import RunConfig
from pipeline.rollout.api import Group
from pipeline.tasks import Task, TaskPrompt

#: the columns of the sample table (`sample_rows`)
SAMPLE_COLUMNS = ("iteration", "prompt_id", "reward", "finish_reason", "output_len", "text")
#: the table's name in the trackers (and `<run>/samples.jsonl`)
SAMPLE_TABLE = "samples"


def run_tracker(cfg: RunConfig) -> Tracker:
    """The run's tracker: `cfg.report_to`'s sinks writing into the run folder (none: only
    `samples.jsonl`), each shown the run's config."""
    config = dataclasses.asdict(cfg)
    return open_tracker(cfg.report_to, cfg.out_dir, config, run_name=Path(cfg.out_dir).name)


def is_sample_iteration(cfg: RunConfig, iteration: int) -> bool:
    """Whether iteration `iteration` (0-based) logs a table of samples."""
    every = cfg.log_samples_every
    return bool(every and cfg.num_logged_samples and (iteration + 1) % every == 0)


def sample_rows(
    task: Task,
    prompts: Sequence[TaskPrompt],
    groups: Sequence[Group],
    rewards: Sequence[float],
    *,
    iteration: int,
    num_rows: int,
) -> list[list[Any]]:
    """Sample 0 of each of the first `num_rows` prompts, as `SAMPLE_COLUMNS`: `rewards` are
    in `score`'s order (prompt, then sample), the text is `task.render`'s. A streamed
    rollout's samples carry no tokens (they went to the trainer ranks): no rows."""
    rows: list[list[Any]] = []
    group_size = len(rewards) // max(len(groups), 1)
    for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
        if len(rows) == num_rows or not group.samples:
            break
        sample = group.samples[0]
        if not len(sample.token_ids):
            continue
        tokens = [int(t) for t in sample.token_ids]
        rows.append([
            iteration, prompt.prompt_id, float(rewards[i * group_size]), sample.finish_reason,
            len(tokens), task.render(prompt, tokens),
        ])  # fmt: skip
    return rows
