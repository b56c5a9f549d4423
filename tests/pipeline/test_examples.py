from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_rollout_library_example_runs(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "examples" / "rollout_library.py"
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(script.parents[1]), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "second rollout generated with weight versions {1}" in out.stdout
    assert (tmp_path / "runs" / "example-rollout" / "trace.json").exists()


@pytest.mark.slow
def test_demo_topology_example_runs(tmp_path: Path) -> None:
    """`python -m examples.demo`: its own messages (extension tags) through 4 processes."""
    root = Path(__file__).parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--batches", "3"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "3/3 batches" in out.stdout and "checked" in out.stdout
