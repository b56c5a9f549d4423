"""Engine backends by name: a generator's `backend` option picks one.

Each entry builds an engine from the generator's options and index (which server of a
list it drives): an `Engine` polled in a step loop (builtin) or a `RemoteEngine` whose
chunks are awaited concurrently (sglang). Backends import their heavy dependencies only
when built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from actors.generator.engine import Engine, RemoteEngine
    from actors.generator.options import GeneratorOptions


def _builtin(options: GeneratorOptions, index: int) -> Engine:
    from actors.generator.builtin import build_torch_engine

    return build_torch_engine(options)


def _sglang(options: GeneratorOptions, index: int) -> RemoteEngine:
    from actors.generator.sglang.engine import SGLangEngine

    return SGLangEngine(options, index)


BACKENDS: dict[str, Callable[[GeneratorOptions, int], Engine | RemoteEngine]] = {
    "builtin": _builtin,
    "sglang": _sglang,
}


def build_engine(options: GeneratorOptions, index: int = 0) -> Engine | RemoteEngine:
    """The engine `options.backend` names (options are validated: the name exists), for
    generator `index`."""
    return BACKENDS[options.backend](options, index)
