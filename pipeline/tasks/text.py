"""Text tasks: a `Task` built from prompts (text or chat messages) and a reward function over
the completion's text, on a Hugging Face tokenizer.

``text_task(prompts, reward, tokenizer, ...)`` and ``jsonl_task(path, reward, tokenizer,
...)`` build a `TextTask`. A prompt is a string, a list of chat messages, or a row (a mapping)
with ``prompt`` (text) or ``messages`` (chat messages) plus any other fields; the reward is
``reward(prompt_meta, completion_text) -> float`` where ``prompt_meta`` holds the row's other
fields.

Token-in/token-out underneath:
- each prompt is encoded ONCE, when the task is built: with chat on, the tokenizer's chat
  template is applied (``apply_chat_template(messages, add_generation_prompt=True,
  tokenize=False)``) and the text encoded with ``add_special_tokens=False``, so a template
  that writes the BOS itself (Llama 3) gets exactly one; with chat off the text is encoded
  with the tokenizer's own special tokens (its BOS, if it adds one). The ids are what travel.
- a completion is decoded (special tokens skipped) only to call the reward; it is never
  re-tokenised for training.
- ``vocab_size`` and the EOS / stop tokens come from the model folder (`hf_folder.py`).
- ``prompt_id`` is a hash of the row (text or messages and fields): stable across runs and
  processes.

A row's fields reach the reward from the task's own table (looked up by prompt id), so they
may be any JSON; the scalar and flat-list fields also travel as `TaskPrompt.meta` (what the
wire carries). The scheduler's scorer rebuilds the task from the same spec, so a factory
must build the same rows every time (a file, a fixed list, a seeded generator).

`TextTask` has no answers to warm-start on: ``sft_example`` raises NotImplementedError and
``supports_sft`` is False (a run starts from the model folder). ``check_prompt_lengths``
raises `PromptTooLongError` naming the first prompt over the model's context, before any
rollout. A reward that raises scores 0 and is counted where the run scores
(`pipeline.tasks.scoring.safe_reward`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.tasks.base import PromptTooLongError, TaskError, TaskPrompt
from pipeline.tasks.hf_folder import (
    folder_stop_ids,
    folder_vocab_size,
    tokenizer_folder,
    tokenizer_from,
)

TextReward = Callable[[Mapping[str, Any], str], float]
"""(the prompt row's fields other than ``prompt`` / ``messages``, completion text) -> reward."""

PromptRow = str | Sequence[Mapping[str, Any]] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TextPrompt:
    """One prompt as built: where it came from, its text (template applied), ids, fields."""

    source: str  # "prompt 3" or "data.jsonl:4", for errors
    text: str
    prompt: TaskPrompt
    fields: Mapping[str, Any]


class TextTask:
    """A `Task` over a fixed list of text prompts and a reward function (module docstring)."""

    supports_sft = False

    def __init__(
        self,
        name: str,
        prompts: Sequence[TextPrompt],
        reward: TextReward,
        tokenizer: Any,
        *,
        vocab_size: int,
        stop_token_ids: Sequence[int],
    ) -> None:
        if not prompts:
            raise TaskError(f"task {name!r} has no prompts")
        self.name = name
        self.vocab_size = vocab_size
        self.eos_token_id = int(stop_token_ids[0])
        self.stop_token_ids = tuple(int(t) for t in stop_token_ids)
        self.tokenizer = tokenizer
        self.reward_fn = reward
        self.prompts = list(prompts)
        self.by_id = {p.prompt.prompt_id: p for p in self.prompts}
        for p in self.prompts:
            bad = [t for t in p.prompt.token_ids if not 0 <= t < vocab_size]
            if bad:
                raise TaskError(f"task {name!r}: {p.source} has token {bad[0]} >= {vocab_size}")

    # --- the Task interface ---

    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        """`n` prompts drawn from the list (without repeats while `n` allows)."""
        picks = rng.choice(len(self.prompts), size=n, replace=n > len(self.prompts))
        return [self.prompts[int(i)].prompt for i in picks]

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        """The reward function on the row's fields and the decoded completion (a result
        that is not a number raises `TaskError`; the run's `safe_reward` scores it 0)."""
        value = self.reward_fn(self.fields(prompt), self.completion_text(completion))
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            kind = type(value).__name__
            raise TaskError(f"task {self.name!r}: the reward returned a {kind}, not a number")
        return float(value)

    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError(f"task {self.name!r} has no answers to warm-start on")

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        """The prompt's text (template applied) followed by the completion's text."""
        row = self.row(prompt)
        head = row.text if row is not None else str(self.tokenizer.decode(list(prompt.token_ids)))
        return head + str(self.tokenizer.decode(list(completion), skip_special_tokens=False))

    # --- beyond the interface ---

    def completion_text(self, completion: Sequence[int]) -> str:
        return str(self.tokenizer.decode([int(t) for t in completion], skip_special_tokens=True))

    def row(self, prompt: TaskPrompt) -> TextPrompt | None:
        """The prompt's row, by id (a batch's repeated prompt is `<id>#k`)."""
        pid = prompt.prompt_id
        return self.by_id.get(pid) or self.by_id.get(pid.partition("#")[0])

    def fields(self, prompt: TaskPrompt) -> Mapping[str, Any]:
        row = self.row(prompt)
        return row.fields if row is not None else prompt.meta

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt, in tokens."""
        return max(len(p.prompt.token_ids) for p in self.prompts)

    def check_prompt_lengths(self, max_prompt_tokens: int) -> None:
        for p in self.prompts:
            if len(p.prompt.token_ids) > max_prompt_tokens:
                raise PromptTooLongError(
                    f"task {self.name!r}: {p.source} ({p.prompt.prompt_id}) has "
                    f"{len(p.prompt.token_ids)} tokens, more than the {max_prompt_tokens} the "
                    "model's context leaves for a prompt"
                )


def text_task(
    prompts: Iterable[PromptRow],
    reward: TextReward,
    tokenizer: Any,
    *,
    name: str = "text",
    chat: bool | None = None,
    system: str | None = None,
    vocab_size: int | None = None,
    eos_token_id: int | None = None,
    sources: Sequence[str] | None = None,
) -> TextTask:
    """A `TextTask` over `prompts` (strings, chat message lists, or rows with ``prompt`` or
    ``messages`` and fields for the reward).

    `tokenizer`: a model folder (its tokenizer, vocabulary and EOS are read from it) or a
    loaded tokenizer (anything with ``encode`` / ``decode`` / ``apply_chat_template``).
    `chat`: apply the chat template to text prompts (None: when the tokenizer has one;
    ``messages`` always use it), with `system` as a system message first. `vocab_size` /
    `eos_token_id` override what the folder says. `sources`: how errors name each prompt
    (default "prompt <i>")."""
    folder = None
    if isinstance(tokenizer, str | os.PathLike):
        folder = Path(tokenizer)
        tokenizer = tokenizer_from(folder)
    else:
        folder = tokenizer_folder(tokenizer)
    if vocab_size is None:
        vocab_size = folder_vocab_size(folder, tokenizer)
    stops = folder_stop_ids(folder, tokenizer) if eos_token_id is None else ()
    if eos_token_id is not None:
        stops = (eos_token_id,)
    use_chat = bool(getattr(tokenizer, "chat_template", None)) if chat is None else chat
    built = []
    for i, raw in enumerate(prompts):
        source = sources[i] if sources is not None else f"prompt {i}"
        built.append(_build(source, raw, tokenizer, use_chat, system))
    return TextTask(name, built, reward, tokenizer, vocab_size=vocab_size, stop_token_ids=stops)


def jsonl_task(
    path: str | os.PathLike[str], reward: TextReward, tokenizer: Any, **kwargs: Any
) -> TextTask:
    """`text_task` over a JSONL file: one JSON object a line with ``prompt`` or ``messages``
    (blank lines skipped); errors name the file and line. The task's name defaults to the
    file's stem; other keywords as `text_task`'s."""
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except OSError as exc:
        raise TaskError(f"{file}: cannot read the prompts: {exc}") from exc
    rows, sources = [], []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise TaskError(f"{file}:{n}: not JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise TaskError(f"{file}:{n}: a row must be a JSON object, got {type(row).__name__}")
        rows.append(row)
        sources.append(f"{file}:{n}")
    kwargs.setdefault("name", file.stem)
    return text_task(rows, reward, tokenizer, sources=sources, **kwargs)


def _build(
    source: str, raw: PromptRow, tokenizer: Any, chat: bool, system: str | None
) -> TextPrompt:
    """One prompt: its row checked, the template applied once, its text encoded once."""
    row = _as_row(source, raw)
    fields = {k: v for k, v in row.items() if k not in ("prompt", "messages")}
    if "messages" in row:
        messages = _messages(source, row["messages"])
        text, ids = _apply_template(source, tokenizer, messages)
    elif chat:
        messages = [{"role": "user", "content": row["prompt"]}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        text, ids = _apply_template(source, tokenizer, messages)
    else:
        text = row["prompt"]
        ids = list(tokenizer.encode(text))  # the tokenizer's own BOS, if it adds one
    key = json.dumps(row, sort_keys=True, default=str, ensure_ascii=False)
    prompt_id = "t" + hashlib.sha256(key.encode()).hexdigest()[:16]
    meta = {k: v for k, v in fields.items() if _travels(v)}
    prompt = TaskPrompt(prompt_id=prompt_id, token_ids=tuple(int(t) for t in ids), meta=meta)
    return TextPrompt(source=source, text=text, prompt=prompt, fields=fields)


def _as_row(source: str, raw: PromptRow) -> Mapping[str, Any]:
    if isinstance(raw, str):
        return {"prompt": raw}
    if isinstance(raw, Mapping):
        has = [k for k in ("prompt", "messages") if k in raw]
        if len(has) != 1:
            raise TaskError(f"{source}: a row needs exactly one of 'prompt' or 'messages'")
        if "prompt" in raw and not isinstance(raw["prompt"], str):
            raise TaskError(f"{source}: 'prompt' must be text")
        return raw
    if isinstance(raw, Sequence):
        return {"messages": list(raw)}
    raise TaskError(f"{source}: a prompt is text, chat messages or a row, not {type(raw).__name__}")


def _messages(source: str, messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise TaskError(f"{source}: 'messages' must be a non-empty list of chat messages")
    for m in messages:
        if not (isinstance(m, Mapping) and isinstance(m.get("role"), str) and "content" in m):
            raise TaskError(f"{source}: a chat message needs 'role' and 'content', got {m!r}")
    return [dict(m) for m in messages]


def _apply_template(
    source: str, tokenizer: Any, messages: list[dict[str, Any]]
) -> tuple[str, list[int]]:
    if not getattr(tokenizer, "chat_template", None):
        raise TaskError(
            f"{source}: chat messages need a chat template, and the tokenizer has none "
            "(chat_template in tokenizer_config.json or chat_template.jinja); give text "
            "prompts with chat=False"
        )
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if not isinstance(text, str):
        raise TaskError(f"{source}: the chat template gave {type(text).__name__}, not text")
    return text, list(tokenizer.encode(text, add_special_tokens=False))


def _travels(value: Any) -> bool:
    """What `TaskPrompt.meta` may carry over the wire: a scalar, or a flat list of one kind."""
    if isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list | tuple):
        kinds = {type(v) for v in value}
        return len(kinds) <= 1 and kinds <= {int, float, str}
    return False
