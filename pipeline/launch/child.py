"""How an actor process is started so that it runs the same seer-rl as its launcher.

`python -m pipeline.cli` puts the working directory first on `sys.path`, so a user's own
`pipeline/` (or `actors/`, `transport/`) folder there would be imported instead of ours in
every actor process. `actor_command()` starts Python with `-P` (3.11+: no working directory,
no script folder on `sys.path`), and `child_env()` points `PYTHONPATH` at the folder the
launcher's own packages came from when that folder is not an installed site (a checkout).
The user's modules (`--task my_pkg.tasks:make`, an actor kind `my_pkg.mod:Cls`) still import
from the working directory: `allow_working_dir_imports()` appends it to the end of
`sys.path`, behind the installed packages.
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path


def package_root() -> Path:
    """The folder that holds this process's `pipeline`, `actors` and `transport`."""
    return Path(__file__).resolve().parents[2]  # <root>/pipeline/launch/child.py


def actor_command() -> list[str]:
    """The start of an actor process's command line (`... actor --config ...` follows)."""
    return [sys.executable, "-P", "-m", "pipeline.cli"]


def child_env(base: Mapping[str, str]) -> dict[str, str]:
    """`base` with `PYTHONPATH` leading to `package_root()` unless that is a site folder
    (an installed package, which a child finds without help)."""
    env = dict(base)
    root = str(package_root())
    sites = {str(Path(p).resolve()) for p in (*site.getsitepackages(), site.getusersitepackages())}
    if root in sites:
        return env
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


def allow_working_dir_imports() -> None:
    """Let a user's module in the working directory import, behind the installed packages
    (`seer` as a console script has its bin folder, not the working directory, first on
    `sys.path`; an actor started with `-P` has neither)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.append(cwd)


#: the package names a folder (or module) of a user's could shadow in an actor process
PACKAGES = ("pipeline", "actors", "transport")


def shadowing(folder: str | os.PathLike[str]) -> list[Path]:
    """What in `folder` would be imported instead of this process's packages if `folder`
    came first on an actor's `sys.path`: a `pipeline/`, `actors/` or `transport/` folder or
    module that is not ours. Ray puts the driver's working directory first on every worker's
    `sys.path` (and starts it there), which `-P` cannot undo, so its launcher refuses such a
    directory instead."""
    base = Path(folder).resolve()
    if base == package_root():
        return []
    found = []
    for name in PACKAGES:
        for candidate in (base / name, base / f"{name}.py"):
            if candidate.exists():
                found.append(candidate)
    return found
