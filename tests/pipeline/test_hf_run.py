"""`seer run --model DIR --task mod:factory`: the RL loop on a Hugging Face folder with a text
task, from the folder to an export that transformers loads with its tokenizer."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest
import torch

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from actors.model.hf_config import ModelFolderError
from pipeline.cli.run import add_parser, run_config
from pipeline.rl.config import RUN_TRAINER, RunConfig
from pipeline.rl.loop import train
from pipeline.tasks.hf_folder import model_folder, tokenizer_from
from pipeline.tasks.text import TextTask, text_task
from tests.hf_folders import make_hf_folder

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def make_task(model_dir: str | None = None) -> TextTask:
    """A text task a random model gets partly right (even-length completions score 1), so
    groups disagree and the run trains."""
    prompts = [f"say {n} words" for n in range(8)]
    tokenizer = tokenizer_from(model_folder(model_dir))
    return text_task(prompts, lambda meta, text: float(len(text) % 2 == 0), tokenizer, name="even")


def test_seer_run_takes_a_model_folder_and_a_task_import_path() -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["run", "--model", "/m", "--task", "examples.custom_task:make_task"])
    cfg = run_config(args)
    assert (cfg.model, cfg.task) == ("/m", "examples.custom_task:make_task")


async def test_a_folder_model_trains_on_a_text_task_and_exports_for_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import transformers

    folder = make_hf_folder(tmp_path / "qwen2", "qwen2")
    monkeypatch.chdir(ROOT)  # the task's import path resolves from the repository root
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    out = tmp_path / "run"
    cfg = RunConfig(
        model=str(folder), task="tests.pipeline.test_hf_run:make_task",
        iterations=2, prompts_per_iteration=4, group_size=2, max_new_tokens=6,
        generator=GeneratorOptions(model=ModelOptions(max_context=96), max_batch=8),
        trainer=RUN_TRAINER, out_dir=str(out), checkpoint_every=2, num_generators=1,
        eval_prompts=0, mode="inprocess",
    )  # fmt: skip
    rows = await train(cfg)  # warm_start_steps keeps its default: a folder model skips it
    assert [r["weight_version"] for r in rows] == [1, 2]
    assert all(r["output_tokens"] > 0 and r["num_reward_errors"] == 0 for r in rows)
    assert any(0 < r["reward_mean"] < 1 for r in rows)
    # the engine and the trainer compute the same float32 maths on the folder's model
    assert all(r["train_logprob_gap_max"] < 1e-4 for r in rows)
    export = out / "checkpoint" / "hf"
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(export))
    assert type(hf).__name__ == "Qwen2ForCausalLM" and hf.dtype == torch.float32
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(export))
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    before = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).state_dict()
    after = hf.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # it trained

    with pytest.raises(ModelFolderError, match=r"config\.json"):
        await train(dataclasses.replace(cfg, model=str(tmp_path)))
