"""A task over a reasoning-gym dataset, verified by the dataset's own ``score_answer``.

``reasoning_gym_task("basic_arithmetic", model_dir, size=1000, seed=0)`` builds a `TextTask`
over ``reasoning_gym.create_dataset(name, size=size, seed=seed, **config)``: each entry's
``question`` becomes a prompt (chat template applied when `chat`), followed by the
instruction `ANSWER_INSTRUCTION`: the answer goes between ``<answer>`` and ``</answer>``.
The reward takes the text inside the LAST ``<answer>...</answer>`` of the completion (None
when there is none) and returns ``dataset.score_answer(answer, entry)``, a float in [0, 1].

Entries stay in the task, by index (what travels with a prompt is ``{"index": i}``): their
metadata holds tuples and nested dicts the wire does not carry. The dataset is procedural
and seeded, so the scheduler's scorer, which rebuilds the task from the same spec, gets the
same entries.

reasoning-gym is an optional extra, imported when a task is built: ``pip install
'seer-rl[tasks]'``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipeline.tasks.base import TaskError
from pipeline.tasks.text import TextTask, text_task

ANSWER_INSTRUCTION = "Put your final answer between <answer> and </answer>."
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
TASKS_EXTRA = "pip install 'seer-rl[tasks]'"


def extract_answer(text: str) -> str | None:
    """The text inside the last ``<answer>...</answer>`` of `text`, stripped (None: none)."""
    found = ANSWER.findall(text)
    return found[-1].strip() if found else None


def reasoning_gym_task(
    dataset: str,
    tokenizer: Any,
    *,
    size: int = 1000,
    seed: int = 0,
    chat: bool | None = True,
    system: str | None = None,
    name: str | None = None,
    vocab_size: int | None = None,
    eos_token_id: int | None = None,
    **config: Any,
) -> TextTask:
    """A `TextTask` over `size` entries of reasoning-gym's `dataset` (seeded by `seed`;
    `config`: the dataset's own options, e.g. ``max_terms`` for basic_arithmetic).
    `tokenizer`: a model folder or a loaded tokenizer, as `text_task` takes."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise TaskError(f"a reasoning-gym task needs reasoning-gym: {TASKS_EXTRA} ({exc})") from exc
    try:
        data = reasoning_gym.create_dataset(dataset, size=size, seed=seed, **config)
    except Exception as exc:  # an unknown name or a bad option: reasoning-gym's own message
        raise TaskError(f"reasoning-gym dataset {dataset!r}: {type(exc).__name__}: {exc}") from exc
    entries = [data[i] for i in range(size)]

    def reward(meta: Mapping[str, Any], completion: str) -> float:
        entry = entries[int(meta["index"])]
        return float(data.score_answer(extract_answer(completion), entry))

    rows = [
        {"prompt": f"{entry['question']}\n\n{ANSWER_INSTRUCTION}", "index": i}
        for i, entry in enumerate(entries)
    ]
    return text_task(
        rows,
        reward,
        tokenizer,
        name=name or f"reasoning-gym/{dataset}",
        chat=chat,
        system=system,
        vocab_size=vocab_size,
        eos_token_id=eos_token_id,
        sources=[f"{dataset} entry {i}" for i in range(size)],
    )
