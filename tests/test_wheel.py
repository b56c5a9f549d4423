"""The built wheel, installed into a fresh virtualenv outside the checkout, runs: `seer`,
the simulator on its packaged H200 tables, and a tiny in-process rollout. It is built with no
C++ compiler (CC=CXX=false) and no network: the suffix tree's Python twin is used, and says so.

The virtualenv has no site packages of its own beyond the wheel; a .pth file lends it this
environment's (torch, numpy, ...), written after the install so pip sees no seer-rl there,
and its processes run in an empty folder with no PYTHONPATH and `-P`: the checkout is never
on their `sys.path` (the test checks where `pipeline` came from)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
PACKAGES = ("transport", "actors", "pipeline")

# slow: a wheel build, a virtualenv and three interpreters (each importing torch); tens of
# seconds on a quiet machine, minutes on a loaded one
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the tracked sources (the checkout gets no build/ folder, and
    an in-place compiled suffix tree cannot slip in)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    env = {**os.environ, "CC": "false", "CXX": "false"}  # no compiler
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    cmd += ["--no-index", "-w", str(tmp_path / "dist"), str(src)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("seer_rl-*.whl")
    return wheel


def _venv(tmp_path: Path, wheel: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    proc = subprocess.run([*cmd, "--no-index", str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "lend-test-env.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return venv


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in (
        "pipeline/sim/data/costmodel_h200.json",
        "pipeline/sim/data/costmodel_h200_moe.json",
    ):
        assert data in names
    assert {f"{p}/py.typed" for p in PACKAGES} <= names
    assert not [n for n in names if n.endswith((".so", ".cpp")) or n.startswith("tests/")]

    venv = _venv(tmp_path, wheel)
    work = tmp_path / "work"  # an empty working directory, not the checkout
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "OMP_NUM_THREADS": "1"}

    def run(*cmd: str | Path) -> str:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=env, timeout=300)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        return proc.stdout

    seer = venv / "bin" / "seer"
    assert "sim" in run(seer, "--help")
    assert run(seer, "--version").strip() == "seer-rl 0.1.0"  # read from the installed wheel
    out = work / "sim" / "sim-seer.json"
    run(seer, "sim", "seer", "--workload", "moonlight", "--scale", "0.01", "--instances", "2",
        "--json", out)  # fmt: skip
    result = json.loads(out.read_text())  # simulated on the H200 tables from the wheel
    assert list(result["workloads"]) == ["moonlight"] and result["settings"]["label"] == "simulated"

    probe = tmp_path / "probe.py"  # run as a script from a folder holding nothing else
    shutil.copy2(ROOT / "tests" / "packaging_probe.py", probe)
    proc = subprocess.run(
        [venv / "bin" / "python", "-P", probe, work / "rollout"],
        capture_output=True, text=True, cwd=work, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert Path(report["pipeline_file"]).is_relative_to(venv)
    assert report["num_tokens"] == [5, 5]
    assert report["have_compiled_core"] is False and report["suffix_tree_core"] == ["python"]
    assert "suffix_tree_fallback" in proc.stdout + proc.stderr  # the import says so, too
