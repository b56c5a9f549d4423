"""A tool-use example for real models: arithmetic questions, answered with a calculator tool
over several turns (a multi-turn episode on a Hugging Face model folder with a chat template).

The format, stated in the prompt's system message (`SYSTEM`): in each turn the model writes
either ``<tool>EXPRESSION</tool>`` (the calculator evaluates it and answers, as a ``tool``
chat message, with the number or ``error: ...``) or ``<answer>NUMBER</answer>`` (the episode
ends: reward 1 when it is the question's answer, else 0). A turn with neither, or with a
call the calculator cannot read, is malformed: it is scored `MALFORMED_REWARD` and answered
with an error message telling the format, and the episode goes on (never a crash).

The calculator (`calculate`) walks the expression's syntax tree and allows numbers, ``+ - *
/ **`` and parentheses only (never ``eval``), with bounds on the length, the exponent and
the result. Observations are appended as token ids with the chat template's fixed delta
(`pipeline.tasks.chat_turns.ChatDelta`); the model's own tokens are never re-tokenised.

Pieces: `make_task(model_dir)` (the questions as a `TextTask` whose prompts run as
episodes, chat template applied: ``seer run --task examples.tool_use:make_task --model
DIR`` trains on them),
`episode_prompts(task, model_dir)` (its prompts for `Rollout.generate(..., episode=EPISODE)`,
each with its answer and the model folder in ``env_info``), `make_env` (the environment
factory, ``examples.tool_use:make_env``) and `run` (a rollout of episodes on a folder):

    python -m examples.tool_use --model /models/Qwen2.5-0.5B-Instruct
prints each episode's conversation as the model saw it, with its reward and end reason.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import functools
import math
import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from actors.environment import StepResult
from pipeline.rollout.api import Group, Rollout, rollout_config
from pipeline.tasks.chat_turns import ChatDelta
from pipeline.tasks.hf_folder import model_folder, tokenizer_from
from pipeline.tasks.text import TextTask, text_task
from transport.messages import EpisodeSpec, PromptSpec, SamplingSpec

SYSTEM = "Calculate with <tool>expression</tool>. Reply <answer>number</answer>."
QUESTIONS = (
    ("What is 17 * 23 + 4?", 395),
    ("What is (125 - 37) * 6?", 528),
    ("What is 2 ** 10 - 999?", 25),
    ("What is 81 / 9 + 12 * 3?", 45),
)
MALFORMED_REWARD = -0.1
"""A turn with no readable tool call or answer scores this (and the episode goes on)."""
FORMAT_ERROR = "error: write <tool>expression</tool> or <answer>number</answer>"
ENVIRONMENT = "examples.tool_use:make_env"
EPISODE = EpisodeSpec(
    environment=ENVIRONMENT, max_turns=4, max_turn_tokens=128, max_observation_tokens=128
)

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e18
_CALL = re.compile(r"<tool>(.*?)</tool>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


class CalculatorError(ValueError):
    """An expression the calculator does not accept (the message says why)."""


def calculate(expression: str) -> int | float:
    """The value of an arithmetic `expression`: numbers, + - * / ** and parentheses only."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError("not an arithmetic expression") from None
    value = _value(tree.body)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _value(node: ast.expr) -> int | float:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"{node.value!r} is not a number")
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"an exponent over {MAX_EXPONENT}")
        if isinstance(node.op, ast.Div) and right == 0:
            raise CalculatorError("division by zero")
        try:
            result = _BINARY[type(node.op)](left, right)
        except (OverflowError, ZeroDivisionError) as exc:
            raise CalculatorError(str(exc)) from None
        if isinstance(result, complex):
            raise CalculatorError("a complex result")
        return _checked(result)
    raise CalculatorError(f"{type(node).__name__} is not allowed (numbers, + - * / ** only)")


def _checked(value: int | float) -> int | float:
    if (isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"a number over {MAX_MAGNITUDE:g}")
    return value


def respond(text: str, answer: float) -> tuple[str | None, float, bool]:
    """(tool message or None, reward, done) for one turn's `text` (the module's format)."""
    found = _ANSWER.search(text)
    call = _CALL.search(text)
    if found is not None and (call is None or found.start() < call.start()):
        try:
            given = float(found.group(1).strip())
        except ValueError:
            return FORMAT_ERROR, MALFORMED_REWARD, False
        return None, float(math.isclose(given, answer, abs_tol=1e-6)), True
    if call is None:
        return FORMAT_ERROR, MALFORMED_REWARD, False
    try:
        return str(calculate(call.group(1))), 0.0, False
    except CalculatorError as exc:
        return f"error: {exc}", MALFORMED_REWARD, False


@functools.cache
def _chat(folder: str) -> tuple[Any, ChatDelta]:
    """The folder's tokenizer and its tool-message delta (once per process)."""
    tokenizer = tokenizer_from(folder)
    return tokenizer, ChatDelta.from_tokenizer(tokenizer, "tool", system=SYSTEM)


class CalculatorEnv:
    """One episode: the question's answer, the tokenizer, the calculator (module)."""

    def __init__(self) -> None:
        self.answer = 0.0
        self.tokenizer: Any = None
        self.delta: ChatDelta | None = None

    async def reset(self, prompt_ids: tuple[int, ...], info: Mapping[str, Any]) -> list[int]:
        self.answer = float(info["answer"])
        self.tokenizer, self.delta = _chat(str(model_folder(info.get("model_dir"))))
        return []  # the prompt is the whole first message

    async def step(self, action_ids: tuple[int, ...]) -> StepResult:
        assert self.delta is not None
        text = self.tokenizer.decode(list(action_ids), skip_special_tokens=True)
        message, reward, done = respond(str(text), self.answer)
        if message is None:
            return StepResult(reward=reward, done=True)
        ids = self.delta.ids(self.tokenizer, message, action_ids)
        return StepResult(observation=ids, reward=reward, done=done)


def make_env() -> CalculatorEnv:
    """The environment factory (`ENVIRONMENT`)."""
    return CalculatorEnv()


def reward(prompt_meta: Mapping[str, Any], completion: str) -> float:
    """A single-turn score of a completion: 1 when its first answer is right."""
    return respond(completion, float(prompt_meta["answer"]))[1] if "<answer>" in completion else 0


class CalculatorTask(TextTask):
    """The questions as a multi-turn text task: every prompt runs as an `episode` of the
    calculator environment (its ``meta`` holds the answer and the model folder, the
    environment's ``env_info``), so ``seer run --task examples.tool_use:make_task --model
    DIR`` trains on the episodes with their loss masks."""

    def __init__(self, base: TextTask, episode: EpisodeSpec) -> None:
        super().__init__(
            base.name, base.prompts, base.reward_fn, base.tokenizer,
            vocab_size=base.vocab_size, stop_token_ids=base.stop_token_ids,
        )  # fmt: skip
        #: the multi-turn episode every prompt runs (the RL loop adds environment actors)
        self.episode = episode


def make_task(
    model_dir: str | None = None,
    questions: Sequence[tuple[str, float]] = QUESTIONS,
    episode: EpisodeSpec = EPISODE,
) -> CalculatorTask:
    """The questions as a text task on the folder's tokenizer (system message: `SYSTEM`)
    whose prompts run as `episode`s; each row carries the folder (``model_dir``) for the
    environment's tokenizer."""
    folder = model_folder(model_dir)
    rows = [{"prompt": q, "answer": a, "model_dir": folder} for q, a in questions]
    base = text_task(rows, reward, folder, name="calculator", system=SYSTEM)
    return CalculatorTask(base, episode)


def episode_prompts(task: TextTask, model_dir: str) -> list[PromptSpec]:
    """The task's prompts for episodes: each with its answer and the model folder."""
    return [
        PromptSpec(
            prompt_id=p.prompt.prompt_id,
            token_ids=p.prompt.token_ids,
            env_info={"answer": float(p.fields["answer"]), "model_dir": model_dir},
        )
        for p in task.prompts
    ]


async def run(
    model_dir: str,
    *,
    group_size: int = 2,
    episode: EpisodeSpec = EPISODE,
    sampling: SamplingSpec | None = None,
    questions: Sequence[tuple[str, float]] = QUESTIONS,
    generator: Mapping[str, Any] | None = None,
    run_dir: str = "",
    mode: Literal["local", "inprocess"] = "inprocess",
) -> tuple[TextTask, list[Group]]:
    """Episodes of every question on the folder's model (the built-in engine; `generator`:
    more generator options; `sampling`'s stop tokens default to the task's): the task and
    the groups."""
    task = make_task(model_dir, questions, episode)
    sampling = sampling or SamplingSpec(max_new_tokens=256)
    if not sampling.stop_token_ids:
        sampling = dataclasses.replace(sampling, stop_token_ids=task.stop_token_ids)
    options = {"model": {"path": model_dir}, "eos_token_id": task.eos_token_id}
    config = rollout_config(
        num_generators=1, generator=options | dict(generator or {}), environments=1,
        run_dir=run_dir,
    )  # fmt: skip
    async with Rollout(config, mode=mode) as rollout:
        groups = await rollout.generate(
            episode_prompts(task, model_dir), group_size, sampling, episode=episode
        )
    return task, groups


def conversation(task: TextTask, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> str:
    """An episode as text: the prompt and the trajectory, special tokens kept."""
    return str(task.tokenizer.decode([*prompt_ids, *token_ids], skip_special_tokens=False))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args(argv)
    sampling = SamplingSpec(temperature=args.temperature, max_new_tokens=512)
    task, groups = asyncio.run(
        run(args.model, group_size=args.group_size, sampling=sampling, mode="local")
    )
    prompts = {p.prompt.prompt_id: p.prompt.token_ids for p in task.prompts}
    for group in groups:
        for s in group.samples:
            assert s.episode is not None
            print(conversation(task, prompts[group.prompt_id], s.token_ids))
            print(f"-- reward {s.episode.reward:g}, {s.episode.end_reason}\n")


if __name__ == "__main__":
    main()
