"""The run folder of a local launch: private to its user, and left without sockets.

`<root>/<run id>/` holds the topology's `config.toml`, the actors' logs (`logs/`, unless
`log_dir` puts them elsewhere: `seer run` puts them in its run folder) and,
over ipc, every actor's socket, whose protection is the folder's mode (ZeroMQ's ipc
sockets have no authentication). The root is `transport.run_dir`, by default
`$TMPDIR/seer-<uid>` (one per user: a folder shared by all users made a second user's
launch fail, and with a loose umask let others reach the sockets).

`make_run_dir(config)` creates the default root and the run folder with mode 0700 and
refuses (`ConfigError`, naming the folder and the fix) one owned by another user, with
group or other access, or that is a symbolic link. `remove_sockets(folder)` deletes the
socket files a stopped run leaves; its logs and config stay where the docs say.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from pipeline.config import ConfigError, PipelineConfig


def make_run_dir(config: PipelineConfig) -> Path:
    """Create (or check) the run folder of `config` and its logs folder; its path."""
    run_dir = config.run_dir
    if config.transport.run_dir:
        run_dir.parent.mkdir(parents=True, exist_ok=True)  # the user's own choice of root
    else:
        private_folder(run_dir.parent)
    private_folder(run_dir)
    config.log_folder().mkdir(parents=True, exist_ok=True)
    return run_dir


def private_folder(path: Path) -> None:
    """`path` exists, is a real folder of this user, mode 0700 (made so if new)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    fix = "remove it, or set transport.run_dir to a folder of your own"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"run folder {path} is not a plain folder (a link or a file): {fix}")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"run folder {path} belongs to user id {info.st_uid}, not to you ({os.getuid()}): {fix}"
        )
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise ConfigError(
            f"run folder {path} has mode {mode:o}: others could reach its ipc sockets; "
            f"`chmod 700 {path}`, or set transport.run_dir to a private folder"
        )


def remove_sockets(folder: Path) -> list[Path]:
    """Delete the socket files directly in `folder` (a stopped run's); those removed."""
    removed = []
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_socket():
                entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed
