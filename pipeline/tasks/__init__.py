"""Tasks and rewards: the ``Task`` interface, the embedded countdown task, and the cached
supervised warm start that gives RL a policy which succeeds sometimes.

``get_task("countdown")`` returns the default; ``get_task("guess")`` is the multi-turn toy
task (a hidden number, higher/lower answers from its environment). A user plugs in their
own task by naming a factory (``get_task("my_pkg.tasks:make_task")``) or calling
``register_task``. A task over text and a reward function is built by ``text_task`` /
``jsonl_task`` (`text.py`, a tokenizer from a Hugging Face folder); ``reasoning_gym_task``
adapts a reasoning-gym dataset (`reasoning_gym.py`). Those two modules import
transformers / reasoning-gym lazily.
"""

from pipeline.tasks.base import (
    PromptTooLongError,
    Task,
    TaskError,
    TaskPrompt,
    check_episode_budget,
    check_prompt_lengths,
    episode_spec,
    get_task,
    register_task,
    stop_token_ids,
    supports_sft,
    task_names,
)
from pipeline.tasks.countdown import (
    Countdown,
    CountdownConfig,
    count_walks,
    describe_lengths,
)
from pipeline.tasks.guess import Guess, GuessConfig, GuessEnv, GuessGame, make_guess_env
from pipeline.tasks.hf_folder import model_folder
from pipeline.tasks.text import TextReward, TextTask, jsonl_task, text_task
from pipeline.tasks.warmstart import evaluate, sft_batch, sft_loss, warm_start, warm_start_path

__all__ = [
    "Countdown",
    "CountdownConfig",
    "Guess",
    "GuessConfig",
    "GuessEnv",
    "GuessGame",
    "PromptTooLongError",
    "Task",
    "TaskError",
    "TaskPrompt",
    "TextReward",
    "TextTask",
    "check_episode_budget",
    "check_prompt_lengths",
    "count_walks",
    "describe_lengths",
    "episode_spec",
    "evaluate",
    "get_task",
    "jsonl_task",
    "make_guess_env",
    "model_folder",
    "register_task",
    "sft_batch",
    "sft_loss",
    "stop_token_ids",
    "supports_sft",
    "task_names",
    "text_task",
    "warm_start",
    "warm_start_path",
]
