"""The actors: one package per actor (splitter, estimator, scheduler, generator, drafts,
dispatcher, trainer), each a pure core in a thin async shell; beside them the runtime
(base.py), shared errors (errors.py), the optional dependencies (extras.py) and model/ (the
policy model, sampling, weights).

What a user writing an actor of their own needs is importable from here
(`from actors import Actor`); it loads on first use (PEP 562 `__getattr__`), so
`import actors` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from actors.base import Actor, ActorContext, Handler
    from actors.extras import MissingExtraError
    from actors.options import ConfigError

_MODULE_OF = {
    "Actor": "actors.base",
    "ActorContext": "actors.base",
    "ConfigError": "actors.options",
    "Handler": "actors.base",
    "MissingExtraError": "actors.extras",
}

__all__ = ["Actor", "ActorContext", "ConfigError", "Handler", "MissingExtraError"]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'actors' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
