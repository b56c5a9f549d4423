"""Task factories named by import path in the tests ("tests.pipeline.task_factories:...")."""

from __future__ import annotations

from typing import Any

from pipeline.tasks import Countdown, CountdownConfig
from tests.pipeline.toytask import SaySeven

#: what `with_model_dir` was last called with
SEEN: dict[str, Any] = {}


def small_countdown() -> Countdown:
    return Countdown(CountdownConfig(max_n=20))


def with_model_dir(model_dir: str | None = None) -> SaySeven:
    SEEN["model_dir"] = model_dir
    return SaySeven()


def raises() -> Any:
    raise RuntimeError("no data today")


def not_a_task() -> Any:
    return {"name": "dict", "vocab_size": 3}


class NoEos(SaySeven):
    eos_token_id = 99  # outside the vocabulary


NOT_CALLABLE = 3
