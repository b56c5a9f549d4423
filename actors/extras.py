"""The package's optional dependencies (pyproject's extras) and importing one of them.

The core (`seer run` on the built-in engine, the `Rollout` API, the simulator) needs only the
core dependencies; each feature that needs more imports it with `require(...)`, which fails
with a `MissingExtraError` naming the extra to install (`pip install 'seer-rl[serve]'`)
instead of a bare `ModuleNotFoundError`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "install_hint", "require"]

#: the top-level module each extra brings, by extra (pyproject.toml's optional-dependencies)
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("starlette", "uvicorn"),
    "plot": ("matplotlib",),
    "ray": ("ray",),
    "router": ("sglang_router", "aiohttp"),
    "sglang": ("aiohttp",),
    "wandb": ("wandb",),
    "tensorboard": ("tensorboard",),
    "tasks": ("reasoning_gym",),
    "hf": ("transformers", "tokenizers"),
}


class MissingExtraError(ImportError):
    """A feature's optional dependency is not installed; the message names the extra."""


def install_hint(extra: str) -> str:
    """The command that installs `extra`: ``pip install 'seer-rl[extra]'``."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; one of {sorted(EXTRAS)}")
    return f"pip install 'seer-rl[{extra}]'"


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import `module` (dotted names allowed), or raise `MissingExtraError` saying that
    `feature` needs the `extra` and how to install it."""
    hint = install_hint(extra)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.partition(".")[0]
        if exc.name is not None and exc.name.partition(".")[0] != top:
            raise  # the package is there but one of its own dependencies is not
        raise MissingExtraError(
            f"{feature} needs {top!r}, from the seer-rl[{extra}] extra: {hint}"
        ) from exc
