"""The run folder: one per user under the temporary folder, private (0700), checked before
a launch; a folder of another user or open to others is refused with the fix named."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pipeline.config import ActorGroup, ConfigError, PipelineConfig, Topology, TransportConfig
from pipeline.launch.rundir import make_run_dir, remove_sockets


def _config(run_dir: str = "") -> PipelineConfig:
    group = ActorGroup(role="doubler", kind="tests.actors.toys:Doubler")
    return PipelineConfig(
        topology=Topology(actors=(group,)), transport=TransportConfig(run_dir=run_dir)
    )


@pytest.fixture
def tmpdir_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system's temporary folder is `tmp_path` (as TMPDIR would make it)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_default_run_folder_is_per_user_and_private(tmpdir_here: Path) -> None:
    config = _config()
    old = os.umask(0o022)  # a usual umask: new folders would be 0755
    try:
        run_dir = make_run_dir(config)
    finally:
        os.umask(old)
    root = tmpdir_here / f"seer-{os.getuid()}"
    assert run_dir == config.run_dir == root / config.run_id
    assert (run_dir / "logs").is_dir()
    assert (root.stat().st_mode & 0o777, run_dir.stat().st_mode & 0o777) == (0o700, 0o700)
    assert make_run_dir(_config()).parent == root  # a second run reuses the root


def test_a_run_folder_open_to_others_is_refused(tmpdir_here: Path) -> None:
    root = tmpdir_here / f"seer-{os.getuid()}"
    root.mkdir(mode=0o700)
    root.chmod(0o755)
    with pytest.raises(ConfigError, match=r"mode 755: others could reach its ipc sockets"):
        make_run_dir(_config())
    explicit = tmpdir_here / "mine"  # a root of the user's choice: its run folder is checked
    config = _config(str(explicit))
    config.run_dir.mkdir(parents=True, mode=0o777)
    config.run_dir.chmod(0o770)
    with pytest.raises(ConfigError, match=str(config.run_dir)):
        make_run_dir(config)


def test_a_link_is_refused(tmpdir_here: Path) -> None:
    (tmpdir_here / "elsewhere").mkdir(mode=0o700)
    (tmpdir_here / f"seer-{os.getuid()}").symlink_to(tmpdir_here / "elsewhere")
    with pytest.raises(ConfigError, match="not a plain folder"):
        make_run_dir(_config())


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_run_folder_of_another_user_is_refused(tmpdir_here: Path) -> None:
    root = tmpdir_here / f"seer-{os.getuid()}"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to user id 65534, not to you"):
        make_run_dir(_config())


def test_remove_sockets_keeps_everything_else(tmp_path: Path) -> None:
    import socket

    (tmp_path / "logs").mkdir()
    (tmp_path / "config.toml").write_text("")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "scheduler-0"))
    assert remove_sockets(tmp_path) == [tmp_path / "scheduler-0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "logs"]
