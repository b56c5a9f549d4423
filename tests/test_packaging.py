"""The package as a user installs it: the core runs without any extra (and each extra's
feature says which extra it needs), the package roots export the embedding API cheaply, and
an actor process runs our packages even from a folder holding a `pipeline/` of its own.
(The built wheel in a fresh virtualenv: tests/test_wheel.py.)"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from actors.extras import EXTRAS, MissingExtraError, install_hint, require
from pipeline.launch.child import actor_command, child_env, package_root, shadowing

ROOT = Path(__file__).parents[1]
PROBE = ROOT / "tests" / "packaging_probe.py"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_the_core_rolls_out_with_no_extra_installed_and_each_extra_is_named(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-P", str(PROBE), str(tmp_path), "--block-extras"],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["num_tokens"] == [5, 5]
    assert report["saved"] == ["metrics", "trace"]  # no timeline.png without matplotlib
    assert not report["can_plot"] and "seer-rl[plot]" in report["plot_hint"]
    for extra, message in report["missing"].items():
        assert f"pip install 'seer-rl[{extra}]'" in message, (extra, message)


def test_pyproject_extras_are_the_ones_the_code_names() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(EXTRAS) <= set(extras) and set(extras) - set(EXTRAS) == {"dev"}
    core = " ".join(project["dependencies"])
    for modules in EXTRAS.values():  # no extra's package is a core dependency
        for module in modules:
            assert module.replace("_", "-") not in core, module
    for pin in (*extras["ray"], *extras["router"]):  # ranges, not exact pins
        assert "==" not in pin, pin
    assert "pytest-xdist" in " ".join(extras["dev"])


def test_require_names_the_extra_or_lets_a_deeper_error_through() -> None:
    assert require("json", extra="plot", feature="x").__name__ == "json"
    with pytest.raises(MissingExtraError, match=r"feature X needs 'no_such_pkg_i36'.*\[serve\]"):
        require("no_such_pkg_i36.sub", extra="serve", feature="feature X")
    with pytest.raises(ValueError, match="unknown extra 'nope'"):
        install_hint("nope")


ROOTS = {"pipeline": "Rollout", "transport": "SamplingSpec", "actors": "Actor"}


def test_the_package_roots_are_cheap_and_export_the_embedding_api() -> None:
    code = (
        "import sys, json\n"
        "import pipeline, actors, transport\n"
        "cheap = not {'torch', 'zmq', 'numpy'} & set(sys.modules)\n"
        "from pipeline import Rollout, SamplingSpec, RolloutRecord, Group, MissingExtraError\n"
        "roots = {m.__name__: m for m in (pipeline, actors, transport)}\n"
        "missing = [f'{r}.{n}' for r, m in roots.items() for n in m.__all__ if not getattr(m, n)]\n"
        "print(json.dumps({'cheap': cheap, 'missing': missing,"
        " 'dir': all(set(m.__all__) <= set(dir(m)) for m in roots.values())}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout) == {"cheap": True, "missing": [], "dir": True}
    import pipeline

    with pytest.raises(AttributeError, match="no attribute 'Rolout'"):
        pipeline.Rolout  # noqa: B018


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_a_package_root_imports_only_for_type_checkers(root: str) -> None:
    """Its names load on first use; an import at module level would make `import pipeline`
    pull a wing (and tests/test_layering.py exempts the root from the wing rule for this)."""
    tree = ast.parse((ROOT / root / "__init__.py").read_text())
    checked: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            checked |= {a.asname or a.name for n in node.body for a in n.names}  # type: ignore[attr-defined]
        elif isinstance(node, ast.ImportFrom):
            assert node.module in ("__future__", "typing"), node.module
        elif isinstance(node, ast.Import):
            assert [a.name for a in node.names] == ["importlib"]
    module = __import__(root)
    assert checked == set(module.__all__)
    assert (ROOT / root / "py.typed").exists()


def test_an_actor_runs_our_packages_from_a_folder_with_its_own_pipeline(tmp_path: Path) -> None:
    shadow = tmp_path / "pipeline"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('the user pipeline/ was imported')\n")
    env = child_env({k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    plain = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "actor", "--help"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert "the user pipeline/ was imported" in plain.stderr  # the risk is real
    ours = subprocess.run(
        [*actor_command(), "actor", "--help"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert "--role" in ours.stdout


def test_a_folder_that_would_shadow_our_packages_is_named(tmp_path: Path) -> None:
    assert shadowing(tmp_path) == []
    assert shadowing(package_root()) == []  # our own checkout shadows nothing
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "transport.py").write_text("")
    assert shadowing(tmp_path) == [tmp_path / "pipeline", tmp_path / "transport.py"]


def test_the_ray_launcher_refuses_a_working_directory_that_would_shadow_our_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray puts the driver's working directory first on every worker's sys.path (`-P`
    cannot undo that), so the launcher names the folder before it starts anything."""
    pytest.importorskip("ray")
    import ray

    from pipeline.launch.cluster import LaunchError
    from pipeline.launch.ray import launch_ray
    from pipeline.rollout.api import rollout_config

    (tmp_path / "actors").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray was started"))

    async def go() -> None:
        async with launch_ray(rollout_config(num_generators=1)):
            pytest.fail("launched")

    with pytest.raises(LaunchError, match=r"actors would shadow seer-rl"):
        anyio.run(go)


def test_a_checkout_that_is_not_installed_reaches_the_child_by_pythonpath() -> None:
    env = child_env({"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(package_root()), "/elsewhere"]
    assert child_env(env) == env  # no second copy
