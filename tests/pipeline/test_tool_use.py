"""The tool-use example (examples/tool_use.py) and the chat-template delta it appends its
observations with (pipeline/tasks/chat_turns.py): the calculator (an ast walk, never eval),
the stated tool-call format and its malformed calls, the delta checked token for token
against full templating of the same conversation, and episodes on a random small Qwen2
folder through the real actors (in one process), whose trajectories are that conversation."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from actors.generator import GeneratorOptions
from actors.model import ModelOptions
from examples import tool_use
from examples.tool_use import FORMAT_ERROR, MALFORMED_REWARD, CalculatorError, calculate, respond
from pipeline.rl.config import RUN_TRAINER, RunConfig
from pipeline.rl.loop import train
from pipeline.tasks.chat_turns import ChatDelta, ChatTemplateError
from tests.hf_folders import make_hf_folder, make_tokenizer
from transport.messages import EpisodeSpec, SamplingSpec

ROOT = Path(__file__).resolve().parents[2]
LLAMA_LIKE = (  # no newline after the end of a turn; the tool role is renamed
    "{% for m in messages %}<|im_start|>{{ 'ipython' if m['role'] == 'tool' else m['role'] }}"
    ":{{ m['content'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}"
)
REWRITES = (  # drops earlier assistant turns' text: no fixed delta
    "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}"
    "<|im_start|>assistant\n<|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@functools.cache
def _tokenizer(tmp: str) -> Any:
    return make_tokenizer(Path(tmp))


@pytest.fixture
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _tokenizer(str(tmp_path_factory.mktemp("tok")))


def test_the_calculator_walks_arithmetic_only() -> None:
    assert calculate("17 * 23 + 4") == 395 and calculate("(125 - 37) * 6") == 528
    assert calculate("81 / 9 + 12 * 3") == 45 and calculate("-2 ** 3") == -8
    assert calculate("7 / 2") == 3.5
    for expression, why in [
        ("__import__('os').system('true')", "Call is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("(1).real", "Attribute is not allowed"),
        ("'a' * 3", "is not a number"),
        ("True + 1", "is not a number"),
        ("1 / 0", "division by zero"),
        ("2 ** 100", "exponent over 64"),
        ("10 ** 30", "number over"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 300, "longer than 200"),
        ("(-8) ** 0.5", "complex"),
    ]:
        with pytest.raises(CalculatorError, match=why):
            calculate(expression)


def test_the_format_tool_calls_answers_and_malformed_turns() -> None:
    assert respond("let me see <tool>17 * 23 + 4</tool>", 395) == ("395", 0.0, False)
    assert respond("<answer>395</answer>", 395) == (None, 1.0, True)
    assert respond("<answer> 394.0 </answer> <tool>1</tool>", 395) == (None, 0.0, True)
    assert respond("<tool>2+2</tool><answer>4</answer>", 4) == ("4", 0.0, False)  # first wins
    assert respond("the answer is 395", 395) == (FORMAT_ERROR, MALFORMED_REWARD, False)
    assert respond("<tool>17 * 23 + 4", 395) == (FORMAT_ERROR, MALFORMED_REWARD, False)
    assert respond("<answer>many</answer>", 395) == (FORMAT_ERROR, MALFORMED_REWARD, False)
    message, reward, done = respond("<tool>open('f')</tool>", 395)
    assert message == "error: Call is not allowed (numbers, + - * / ** only)"
    assert (reward, done) == (MALFORMED_REWARD, False)


@pytest.mark.parametrize("template", ["qwen", "llama_like"])
def test_the_chat_delta_equals_full_templating(tokenizer: Any, template: str) -> None:
    if template == "llama_like":
        tokenizer = _with_template(tokenizer, LLAMA_LIKE)
    delta = ChatDelta.from_tokenizer(tokenizer, "tool", system="be brief")
    end = tokenizer.eos_token_id
    assert delta.end_text == "<|im_end|>" and delta.end_ids == (end,)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3?"}]
    ids = _encode(tokenizer, _render(tokenizer, messages))
    turns = [("<tool>2+3</tool>", "5", True), ("the fox", "error: no", False), ("ok", "7", True)]
    for action, observation, ended in turns:
        action_ids = _encode(tokenizer, action) + ([end] if ended else [])
        ids += action_ids + delta.ids(tokenizer, observation, action_ids)
        messages += [
            {"role": "assistant", "content": action},
            {"role": "tool", "content": observation},
        ]
        # the trajectory so far is token for token the fully templated conversation
        assert ids == _encode(tokenizer, _render(tokenizer, messages))
    if template == "qwen":
        assert delta.prefix == "\n<|im_start|>tool\n"
        assert delta.suffix == "<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_without_a_fixed_delta_is_refused(tokenizer: Any) -> None:
    with pytest.raises(ChatTemplateError, match="no fixed delta"):
        ChatDelta.from_tokenizer(_with_template(tokenizer, REWRITES))
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatDelta.from_tokenizer(_with_template(tokenizer, None))
    raises = "{{ raise_exception('no tools here') if messages[-1]['role'] == 'tool' else '' }}"
    with pytest.raises(ChatTemplateError, match="cannot render a 'tool' message"):
        ChatDelta.from_tokenizer(_with_template(tokenizer, raises))


@pytest.mark.anyio
async def test_tool_use_episodes_on_a_random_small_model(tmp_path: Path) -> None:
    folder = str(make_hf_folder(tmp_path / "qwen2", "qwen2", max_position_embeddings=1024))
    episode = EpisodeSpec(
        environment=tool_use.ENVIRONMENT, max_turns=3, max_turn_tokens=24,
        max_observation_tokens=256,
    )  # fmt: skip
    sampling = SamplingSpec(temperature=1.0, seed=3, max_new_tokens=400)
    task, groups = await tool_use.run(
        folder, group_size=2, episode=episode, sampling=sampling,
        questions=tool_use.QUESTIONS[:2], generator={"max_batch": 4}, run_dir=str(tmp_path),
    )  # fmt: skip
    tokenizer = task.tokenizer
    prompts = {p.prompt.prompt_id: p for p in task.prompts}
    assert [g.prompt_id for g in groups] == list(prompts) and len(groups) == 2
    malformed = compared = 0
    for group in groups:
        row = prompts[group.prompt_id]
        assert len(group.samples) == 2
        for s in group.samples:
            ep = s.episode
            assert ep is not None and ep.end_reason in ("done", "max_turns", "length")
            assert len(ep.loss_mask) == len(s.token_ids) == len(s.logprobs)
            # rebuild the conversation: each action decoded, each tool message from the format
            messages: list[dict[str, str]] = [
                {"role": "system", "content": tool_use.SYSTEM},
                {"role": "user", "content": _question(row.fields["answer"])},
            ]
            assert _render(tokenizer, messages) == row.text
            tokens, mask = list(s.token_ids), list(ep.loss_mask)
            start = 0
            for turn, end in enumerate(ep.turn_ends):
                action = tokens[start:end]
                assert all(mask[start:end]) and action
                if turn >= len(ep.step_rewards):  # not stepped: the budget ran out
                    break
                text = tokenizer.decode(action, skip_special_tokens=True)
                message, reward, _ = respond(text, float(row.fields["answer"]))
                assert ep.step_rewards[turn] == reward
                malformed += reward == MALFORMED_REWARD
                if message is None:
                    break
                stop = end
                while stop < len(tokens) and not mask[stop]:
                    stop += 1
                observation = tokens[end:stop]
                if not observation:  # the last step's answer is not appended
                    assert turn == len(ep.turn_ends) - 1 and end == len(tokens)
                    assert ep.end_reason in ("max_turns", "length")
                    break
                assert observation == _encode(tokenizer, tokenizer.decode(observation))
                ended = action[-1] == tokenizer.eos_token_id
                content = tokenizer.decode(action[:-1] if ended else action)
                messages += [
                    {"role": "assistant", "content": content},
                    {"role": "tool", "content": message},
                ]
                # the trajectory through this observation is the templated conversation
                text_so_far = tokenizer.decode(
                    [*row.prompt.token_ids, *tokens[:stop]], skip_special_tokens=False
                )
                assert text_so_far == _render(tokenizer, messages)
                compared += 1
                start = stop
            assert sum(ep.step_rewards) == pytest.approx(ep.reward)
    assert (
        compared >= 4 and malformed > 0
    )  # a random model's turns are malformed calls: answered, not a crash


@pytest.mark.anyio
async def test_seer_run_trains_on_tool_use_episodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's task declares its `episode`: `seer run --task
    examples.tool_use:make_task --model DIR` runs every prompt as a calculator episode
    (environment actors added, the folder and answer in each prompt's `env_info`) and
    trains on the trajectories; a random model's malformed calls are scored, not a crash."""
    folder = make_hf_folder(tmp_path / "qwen2", "qwen2", max_position_embeddings=1024)
    monkeypatch.chdir(ROOT)  # the task's import path resolves from the repository root
    monkeypatch.setattr("pipeline.rollout.api.plot_timeline", lambda records, path: Path(path))
    task = tool_use.make_task(str(folder))
    assert task.episode == tool_use.EPISODE
    assert all(p.prompt.meta["model_dir"] == str(folder) for p in task.prompts)
    cfg = RunConfig(
        model=str(folder), task="examples.tool_use:make_task", iterations=1,
        prompts_per_iteration=2, group_size=2, max_new_tokens=300, temperature=1.0,
        generator=GeneratorOptions(model=ModelOptions(max_context=512), max_batch=4),
        trainer=RUN_TRAINER, out_dir=str(tmp_path / "run"), checkpoint_every=0,
        num_generators=1, eval_prompts=0, mode="inprocess",
    )  # fmt: skip
    [row] = await train(cfg)
    ends = row["episode_ends"]
    assert sum(ends.values()) == 4 and set(ends) <= {"done", "max_turns", "length"}
    assert row["mean_turns"] >= 2 and row["num_error_samples"] == 0  # turns, tool answers between
    assert row["train_num_samples"] == 4 and row["weight_version"] == 1
    assert row["reward_mean"] < 0  # malformed calls (-0.1 each): answered and scored


def _question(answer: float) -> str:
    return next(q for q, a in tool_use.QUESTIONS if a == answer)


def _render(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def _encode(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]


def _with_template(tokenizer: Any, template: str | None) -> Any:
    import copy

    other = copy.deepcopy(tokenizer)
    other.chat_template = template
    return other
