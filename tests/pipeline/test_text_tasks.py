"""Text tasks on a real (tiny, trained-in-the-test) Hugging Face tokenizer: the chat template
applied once with a single BOS, ids that travel, completions decoded for the reward only,
vocabulary and stop tokens from the folder, typed errors for bad rows and long prompts, the
reasoning-gym adapter with its own verifier, and the examples."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.config import build_options
from pipeline.rl.config import RunConfig
from pipeline.tasks import (
    PromptTooLongError,
    TaskError,
    TextTask,
    check_prompt_lengths,
    get_task,
    jsonl_task,
    stop_token_ids,
    supports_sft,
    text_task,
)
from pipeline.tasks.scoring import TaskScorer, prompt_meta, safe_reward
from tests.pipeline.tokenizer_helpers import BOS, END_OF_TEXT, EOS, make_tokenizer_folder

ROOT = Path(__file__).parents[2]


def ids(task: TextTask, text: str) -> list[int]:
    """`text` as completion tokens (no BOS)."""
    return list(task.tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model")
    return make_tokenizer_folder(path, generation_eos=[3, 2])


@pytest.fixture(scope="module")
def tok(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def seen_reward(log: list[tuple[dict[str, Any], str]]) -> Any:
    def reward(meta: Mapping[str, Any], completion: str) -> float:
        log.append((dict(meta), completion))
        return float(completion.strip() == str(meta["answer"]))

    return reward


def test_chat_template_applied_once_with_one_bos_and_ids_travel(folder: Path, tok: Any) -> None:
    log: list[tuple[dict[str, Any], str]] = []
    task = text_task([{"prompt": "What is 2 + 3?", "answer": 5}], seen_reward(log), folder)
    prompt = task.sample_prompts(1, np.random.default_rng(0))[0]
    bos = tok.convert_tokens_to_ids(BOS)
    assert tok.encode("hi")[0] == bos  # this tokenizer adds a BOS itself, and the template
    text = tok.apply_chat_template(  # writes one too: encoding the text naively gives two
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    assert text.startswith(BOS) and text.endswith("<|assistant|>")
    assert prompt.token_ids == tuple(tok.encode(text, add_special_tokens=False))
    assert prompt.token_ids[0] == bos and prompt.token_ids.count(bos) == 1
    assert tok.decode(list(prompt.token_ids)) == text
    # the completion reaches the reward as text, special tokens skipped
    completion = [*tok.encode(" 5", add_special_tokens=False), tok.convert_tokens_to_ids(EOS)]
    assert task.reward(prompt, completion) == 1.0
    assert log[-1] == ({"answer": 5}, " 5")
    assert task.render(prompt, completion) == f"{text} 5{EOS}"


def test_plain_text_gets_the_tokenizers_own_bos_once(folder: Path, tok: Any) -> None:
    task = text_task(["What is 2 + 3?"], lambda meta, text: 0.0, folder, chat=False)
    prompt = task.prompts[0].prompt
    assert prompt.token_ids == tuple(tok.encode("What is 2 + 3?"))
    assert prompt.token_ids.count(tok.convert_tokens_to_ids(BOS)) == 1


def test_messages_and_system_prompts(folder: Path, tok: Any) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    a = text_task([messages], lambda m, t: 0.0, folder).prompts[0]
    b = text_task(["Hi"], lambda m, t: 0.0, folder, system="Be brief.").prompts[0]
    assert a.text == b.text == f"{BOS}<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>"
    assert a.prompt.token_ids == b.prompt.token_ids


def test_vocabulary_stop_tokens_ids_and_no_warm_start_from_the_folder(
    folder: Path, tok: Any
) -> None:
    task = text_task(["a", "b", "a"], lambda m, t: 0.0, folder)
    end, eot = tok.convert_tokens_to_ids(EOS), tok.convert_tokens_to_ids(END_OF_TEXT)
    assert task.vocab_size == 400  # config.json's, not the tokenizer's 300
    assert (task.eos_token_id, stop_token_ids(task)) == (end, (end, eot))
    pids = [p.prompt.prompt_id for p in task.prompts]
    assert pids[0] == pids[2] != pids[1]  # a hash of the row: stable
    assert pids == [p.prompt.prompt_id for p in text_task(["a", "b", "a"], len, tok).prompts]
    assert not supports_sft(task)
    with pytest.raises(NotImplementedError):
        task.sft_example(task.prompts[0].prompt, np.random.default_rng(0))
    drawn = task.sample_prompts(3, np.random.default_rng(1))
    assert sorted(p.token_ids for p in drawn) == sorted(p.prompt.token_ids for p in task.prompts)


def test_jsonl_fields_reach_the_reward_and_flat_ones_travel(tmp_path: Path, folder: Path) -> None:
    rows = [
        {"prompt": "What is 2 + 3?", "answer": 5, "extra": {"nested": [1, [2]]}},
        {"messages": [{"role": "user", "content": "Say hi"}], "answer": "hi", "tags": ["a"]},
    ]
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    log: list[tuple[dict[str, Any], str]] = []
    task = jsonl_task(path, seen_reward(log), folder)
    assert task.name == "data" and len(task.prompts) == 2
    first, second = (p.prompt for p in task.prompts)
    assert first.meta == {"answer": 5} and second.meta == {"answer": "hi", "tags": ["a"]}
    sent = prompt_meta(first.prompt_id + "#1", first)  # what the wire carries (a repeat)
    scorer = TaskScorer("countdown")
    scorer.task = task  # the scheduler's copy, built from the same spec
    assert scorer(sent.prompt_id, sent.meta, first.token_ids, ids(task, "5")) == 1.0
    assert log[-1][0] == {"answer": 5, "extra": {"nested": [1, [2]]}}  # the full row


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("not json", r"data.jsonl:2: not JSON"),
        ("[1, 2]", r"data.jsonl:2: a row must be a JSON object"),
        ('{"answer": 1}', r"data.jsonl:2: a row needs exactly one of 'prompt' or 'messages'"),
        ('{"prompt": 3}', r"data.jsonl:2: 'prompt' must be text"),
        ('{"messages": [{"content": "x"}]}', r"data.jsonl:2: a chat message needs 'role'"),
    ],
)
def test_bad_rows_name_the_file_and_line(
    tmp_path: Path, folder: Path, line: str, match: str
) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(TaskError, match=match):
        jsonl_task(path, lambda m, t: 0.0, folder)


def test_folder_and_template_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="does not exist"):
        text_task(["x"], lambda m, t: 0.0, tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match=r"empty'.*no tokenizer could be loaded"):
        text_task(["x"], lambda m, t: 0.0, tmp_path / "empty")
    plain = make_tokenizer_folder(tmp_path / "plain", chat_template=None)
    assert text_task(["x"], lambda m, t: 0.0, plain).prompts[0].text == "x"  # chat: auto
    with pytest.raises(TaskError, match="prompt 0: chat messages need a chat template"):
        text_task(["x"], lambda m, t: 0.0, plain, chat=True)
    with pytest.raises(TaskError, match="has no prompts"):
        text_task([], lambda m, t: 0.0, plain)


def test_a_prompt_longer_than_the_context_is_refused_before_any_rollout(folder: Path) -> None:
    task = text_task(["short", "a much longer prompt " * 8], lambda m, t: 0.0, folder)
    n = task.max_prompt_tokens
    check_prompt_lengths(task, n)
    with pytest.raises(PromptTooLongError, match=rf"prompt 1 \(t[0-9a-f]+\) has {n} tokens"):
        check_prompt_lengths(task, n - 1)
    check_prompt_lengths(get_task("countdown"), 4)  # a task of fresh prompts is not asked


def test_a_reward_that_raises_or_returns_no_number_scores_0_and_is_counted(folder: Path) -> None:
    def reward(meta: Mapping[str, Any], text: str) -> Any:
        if text == "boom":
            raise ZeroDivisionError("a user's bug")
        return None if text == "none" else 1.0

    task = text_task(["q"], reward, folder)
    prompt = task.prompts[0].prompt
    assert safe_reward(task, prompt, ids(task, "fine")) == (1.0, False)
    assert safe_reward(task, prompt, ids(task, "boom")) == (0.0, True)
    assert safe_reward(task, prompt, ids(task, "none")) == (0.0, True)


def test_reasoning_gym_scores_a_right_answer_1_and_a_wrong_one_0(folder: Path) -> None:
    import reasoning_gym

    from pipeline.tasks.reasoning_gym import extract_answer, reasoning_gym_task

    task = reasoning_gym_task("basic_arithmetic", folder, size=5, seed=3)
    again = reasoning_gym_task("basic_arithmetic", folder, size=5, seed=3)  # the scorer's copy
    entries = reasoning_gym.create_dataset("basic_arithmetic", size=5, seed=3)
    for i, p in enumerate(task.prompts):
        entry = entries[i]
        assert entry["question"] in p.text and "<answer>" in p.text
        assert p.prompt.meta == {"index": i}
        assert p.prompt.token_ids == again.prompts[i].prompt.token_ids
        right = ids(task, f"so <answer>1</answer> no, <answer>{entry['answer']}</answer>")
        wrong = ids(task, f"<answer>{int(entry['answer']) + 1}</answer>")
        assert again.reward(p.prompt, right) == 1.0
        assert again.reward(p.prompt, wrong) == 0.0
        assert again.reward(p.prompt, ids(task, entry["answer"])) == 0.0  # no tags
    assert extract_answer("x <answer> 7 </answer>") == "7" and extract_answer("7") is None
    with pytest.raises(TaskError, match="reasoning-gym dataset 'no_such_dataset'"):
        reasoning_gym_task("no_such_dataset", folder, size=2)


def test_reasoning_gym_missing_names_the_extra(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from pipeline.tasks.reasoning_gym import reasoning_gym_task

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # as if not installed
    with pytest.raises(TaskError, match=r"pip install 'seer-rl\[tasks\]'"):
        reasoning_gym_task("basic_arithmetic", folder, size=2)


def test_the_examples_build_from_the_run_folder_or_seer_model(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    task = get_task("examples.custom_task:make_task", model_dir=str(folder))
    assert isinstance(task, TextTask) and task.name == "add-two-numbers"
    prompt = task.prompts[0]
    answer = prompt.fields["answer"]
    assert "What is" in prompt.text
    assert task.reward(prompt.prompt, ids(task, f" {answer}!")) == 1.0
    assert task.reward(prompt.prompt, ids(task, f"{answer + 1}")) == 0.0
    monkeypatch.delenv("SEER_MODEL", raising=False)
    with pytest.raises(TaskError, match=r"needs a model folder.*SEER_MODEL"):
        get_task("examples.custom_task:make_task")
    monkeypatch.setenv("SEER_MODEL", str(folder))
    assert get_task("examples.custom_task:make_task").prompts[0].text == prompt.text


def test_the_example_toml_loads_as_a_run_config() -> None:
    path = ROOT / "examples" / "qwen_sglang.toml"
    cfg = build_options(RunConfig, tomllib.loads(path.read_text()), str(path))
    assert cfg.task == "examples.custom_task:make_task" and cfg.warm_start_steps == 0
    assert cfg.generator.backend == "sglang" and cfg.generator.model.dtype == "bfloat16"
    assert cfg.model == "/models/Qwen2.5-0.5B-Instruct"
    assert "{server_args}" in cfg.generator.sglang.command
    quick = ROOT / "examples" / "quick_run.toml"  # docs/own-model-and-task.md's small run
    small = build_options(RunConfig, tomllib.loads(quick.read_text()), str(quick))
    assert (small.iterations, small.num_generators, small.eval_prompts) == (2, 1, 0)
    assert small.checkpoint_every == small.iterations  # the run ends with an export


@pytest.mark.anyio
async def test_a_text_task_by_import_path_trains_an_iteration(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The RL loop on `examples.custom_task:make_task` (its folder from SEER_MODEL; a random
    tiny model of the folder's vocabulary, no warm start): prompts as ids, the completions
    scored as text, every reward a number, the stop tokens the folder's."""
    import dataclasses

    from actors.generator import GeneratorOptions
    from actors.model import ModelOptions
    from pipeline.rl.config import RUN_TRAINER
    from pipeline.rl.loop import train

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("SEER_MODEL", str(folder))
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    model = ModelOptions(hidden=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate=64)
    cfg = RunConfig(
        task="examples.custom_task:make_task",
        iterations=1, prompts_per_iteration=4, group_size=2, max_new_tokens=4,
        generator=GeneratorOptions(model=dataclasses.replace(model, max_context=64), max_batch=8),
        warm_start_steps=0, trainer=RUN_TRAINER, out_dir=str(tmp_path / "run"),
        checkpoint_every=0, num_generators=1, eval_prompts=0, mode="inprocess",
    )  # fmt: skip
    [row] = await train(cfg)
    assert row["weight_version"] == 1 and row["output_tokens"] > 0
    assert row["num_reward_errors"] == 0 and 0.0 <= row["reward_mean"] <= 1.0
    short = GeneratorOptions(model=dataclasses.replace(model, max_context=16))
    too_long = r"'add-two-numbers': prompt \d+ .* tokens, more than the 15"
    with pytest.raises(PromptTooLongError, match=too_long):
        await train(dataclasses.replace(cfg, generator=short))
