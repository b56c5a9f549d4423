"""Tasks by registered name or import path ("package.module:factory"), and each way a spec
can be wrong giving a typed error that names it; the scheduler's scorer builds the same
task from the same spec."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from actors.dispatcher.stream import StreamError, load_scorer
from pipeline.tasks import Countdown, TaskError, get_task, stop_token_ids
from pipeline.tasks.scoring import TaskScorer, first_error_index, prompt_meta, safe_reward
from tests.pipeline import task_factories
from tests.pipeline.toytask import SaySeven

ROOT = Path(__file__).parents[2]
FACTORIES = "tests.pipeline.task_factories"


def test_registered_names_keep_working() -> None:
    assert isinstance(get_task("countdown"), Countdown)
    with pytest.raises(TaskError, match=r"unknown task 'nope'.*countdown"):
        get_task("nope")
    assert issubclass(TaskError, ValueError)  # callers catching ValueError still do


def test_a_factory_by_import_path_and_model_dir_when_it_takes_it() -> None:
    task = get_task(f"{FACTORIES}:small_countdown")
    assert isinstance(task, Countdown) and task.config.max_n == 20
    assert isinstance(get_task(f"{FACTORIES}:with_model_dir", model_dir="/m"), SaySeven)
    assert task_factories.SEEN["model_dir"] == "/m"
    get_task(f"{FACTORIES}:with_model_dir")
    assert task_factories.SEEN["model_dir"] is None
    assert isinstance(get_task("tests.pipeline.toytask:SaySeven", model_dir="/m"), SaySeven)
    assert stop_token_ids(get_task("countdown")) == (258,)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no_such_module_xyz:make", r"'no_such_module_xyz:make'.*does not import.*No module"),
        ("tests.pipeline.broken_task_module:make", r"does not import: ImportError: .*frobnicate"),
        (f"{FACTORIES}:missing", r"has no attribute 'missing'"),
        (f"{FACTORIES}:NOT_CALLABLE", r"'NOT_CALLABLE' is a int, not a factory"),
        (f"{FACTORIES}:raises", r"factory raised RuntimeError: no data today"),
        (f"{FACTORIES}:not_a_task", r"returned a dict, not a Task \(missing name, vocab_size"),
        (f"{FACTORIES}:NoEos", r"eos_token_id must be an int in \[0, 16\), got 99"),
        (":make", r"not 'package.module:factory'"),
    ],
)
def test_a_bad_spec_is_a_typed_error_naming_it(spec: str, match: str) -> None:
    with pytest.raises(TaskError, match=match) as info:
        get_task(spec)
    assert repr(spec) in str(info.value)


def test_the_working_directory_is_importable_as_from_a_console_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`seer` is a console script: sys.path[0] is its bin folder, not where the user runs
    it; a task module in the working directory must still import."""
    (tmp_path / "my_cwd_tasks.py").write_text(
        "from tests.pipeline.toytask import SaySeven\ndef make():\n    return SaySeven()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "my_cwd_tasks", raising=False)
    assert get_task("my_cwd_tasks:make").name == "say7"
    assert sys.path[-1] == str(tmp_path)


def test_the_scheduler_scorer_builds_the_task_from_the_same_spec() -> None:
    spec = f"{FACTORIES}:with_model_dir"
    scorer = load_scorer("pipeline.tasks.scoring:task_reward", spec, "/models/x")
    assert isinstance(scorer, TaskScorer) and task_factories.SEEN["model_dir"] == "/models/x"
    task = get_task(spec)
    prompt = task.sample_prompts(1, np.random.default_rng(0))[0]
    sent = prompt_meta("p0", prompt)
    assert scorer("p0", sent.meta, prompt.token_ids, [7, 7, 15]) == 1.0
    with pytest.raises(StreamError, match="no task"):
        load_scorer("pipeline.tasks.scoring:task_reward", f"{FACTORIES}:raises")


class Flaky(SaySeven):
    def reward(self, prompt, completion):  # type: ignore[no-untyped-def]
        if 3 in completion:
            raise ZeroDivisionError("boom")
        return float("nan") if 4 in completion else super().reward(prompt, completion)

    def first_error(self, prompt, completion):  # type: ignore[no-untyped-def]
        return 1 / 0 if 3 in completion else 0


def test_a_reward_that_raises_or_is_not_finite_scores_0_and_is_counted() -> None:
    task = Flaky()
    prompt = task.sample_prompts(1, np.random.default_rng(0))[0]
    assert safe_reward(task, prompt, [7, 15]) == (1.0, False)
    assert safe_reward(task, prompt, [3, 15]) == (0.0, True)
    assert safe_reward(task, prompt, [4, 15]) == (0.0, True)
    scorer = TaskScorer("countdown")
    scorer.task = task
    scorer("p", {}, prompt.token_ids, [3])
    scorer("p", {}, prompt.token_ids, [7])
    assert scorer.num_reward_errors == 1
    assert first_error_index(task, prompt, [5, 15], 0.0) == 0  # step credit's input
    assert first_error_index(task, prompt, [3, 15], 0.0) == -1  # its bug is not the run's


def test_seer_run_task_flag_and_a_text_task_refuses_a_warm_start(tmp_path: Path) -> None:
    from pipeline.cli.main import build_parser
    from pipeline.cli.run import run_config
    from pipeline.rl.config import RunConfig, warm_model
    from pipeline.tasks import supports_sft

    args = build_parser().parse_args(["run", "--task", f"{FACTORIES}:small_countdown"])
    assert run_config(args).task == f"{FACTORIES}:small_countdown"

    class NoAnswers(SaySeven):
        supports_sft = False

    assert supports_sft(SaySeven()) and not supports_sft(NoAnswers())
    cfg = RunConfig(task="x:y", cache_dir=str(tmp_path))
    with pytest.raises(TaskError, match=r"'x:y' has no answers.*warm_start_steps = 0"):
        warm_model(cfg, NoAnswers(), lambda info: None)
