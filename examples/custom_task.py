"""Your own task without forking: prompts as text, a reward function over the completion.

Use it as ``task = "examples.custom_task:make_task"`` in a run's TOML, or ``seer run --task
examples.custom_task:make_task``, from the repository root (the working directory is
importable), on any model folder with a tokenizer.

The convention for task factories: a factory takes no arguments, or a keyword ``model_dir``
which the run fills with its model folder (None when it has none); `model_folder` falls back
to the ``SEER_MODEL`` environment variable. The scheduler's scorer calls the same factory
with the same folder, so a factory must build the same prompts every time (here: a fixed
seed).

Each prompt row has ``prompt`` (text; the model folder's chat template is applied when it has
one) and fields of your own (here ``answer``), which the reward receives as ``prompt_meta``.
The completion reaches the reward as text (decoded once, special tokens skipped); training
uses the generated token ids as they were.

    SEER_MODEL=/models/Qwen2.5-0.5B-Instruct python examples/custom_task.py
prints two prompts as the model sees them and scores a right and a wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.tasks.hf_folder import model_folder
from pipeline.tasks.text import TextTask, text_task

NUMBER = re.compile(r"-?\d+")


def prompts(n: int = 512, seed: int = 0) -> list[dict[str, Any]]:
    """`n` addition questions with their answers (the same list for the same seed)."""
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in rng.integers(0, 100, size=(n, 2)).tolist():
        rows.append({"prompt": f"What is {a} + {b}? Reply with the number only.", "answer": a + b})
    return rows


def reward(prompt_meta: Mapping[str, Any], completion: str) -> float:
    """1 when the first number in the completion is the answer, else 0."""
    found = NUMBER.search(completion)
    return float(found is not None and int(found.group()) == prompt_meta["answer"])


def make_task(model_dir: str | None = None) -> TextTask:
    """The addition task on the tokenizer of `model_dir` (else ``$SEER_MODEL``)."""
    return text_task(prompts(), reward, model_folder(model_dir), name="add-two-numbers")


if __name__ == "__main__":
    task = make_task()
    for p in task.sample_prompts(2, np.random.default_rng(0)):
        answer = task.fields(p)["answer"]
        right = task.tokenizer.encode(f"{answer}", add_special_tokens=False)
        print(repr(task.render(p, [])), f"{len(p.token_ids)} tokens")
        print("  right answer scores", task.reward(p, [*right, task.eos_token_id]))
        print("  wrong answer scores", task.reward(p, task.tokenizer.encode("no idea")))
