"""A task whose verifier nobody here wrote: reasoning-gym's basic arithmetic, scored by the
dataset's own ``score_answer`` (``pip install 'seer-rl[tasks]'``).

Use it as ``task = "examples.reasoning_gym_task:make_task"`` (or ``seer run --task
examples.reasoning_gym_task:make_task``) from the repository root. Like
``examples/custom_task.py``, the factory takes the run's model folder as ``model_dir``
(else ``$SEER_MODEL``). The prompt asks for the answer between ``<answer>`` and
``</answer>``; the reward scores the text inside the last such pair
(`pipeline.tasks.reasoning_gym`). Any other reasoning-gym dataset works the same way: change
`DATASET` and its options.
"""

from __future__ import annotations

from pipeline.tasks.hf_folder import model_folder
from pipeline.tasks.reasoning_gym import reasoning_gym_task
from pipeline.tasks.text import TextTask

DATASET = "basic_arithmetic"
OPTIONS = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}


def make_task(model_dir: str | None = None) -> TextTask:
    """2,000 basic-arithmetic questions (seed 0) on the tokenizer of `model_dir`."""
    return reasoning_gym_task(DATASET, model_folder(model_dir), size=2000, seed=0, **OPTIONS)
