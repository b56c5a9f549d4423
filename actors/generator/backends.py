"""Engine backends by name: a generator's `backend` option picks one.

Each entry builds an `Engine` from the generator's options; backends import their heavy
dependencies only when built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from actors.generator.engine import Engine
    from actors.generator.options import GeneratorOptions


def _builtin(options: GeneratorOptions) -> Engine:
    from actors.generator.builtin import build_torch_engine

    return build_torch_engine(options)


BACKENDS: dict[str, Callable[[GeneratorOptions], Engine]] = {"builtin": _builtin}


def build_engine(options: GeneratorOptions) -> Engine:
    """The engine `options.backend` names (options are validated: the name exists)."""
    return BACKENDS[options.backend](options)
