"""The import graph follows the layering: transport <- actors <- pipeline, and the actor
packages never import each other in both directions (DESIGN.md, CONVENTIONS.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[1]


def imports(top: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """(module path parts, imported module) for every absolute import under `top`."""
    for path in sorted((ROOT / top).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield parts, alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                yield parts, node.module


def test_transport_imports_neither_actors_nor_pipeline() -> None:
    bad = [(m, i) for m, i in imports("transport") if i.split(".")[0] in ("actors", "pipeline")]
    assert not bad


def test_actors_import_nothing_from_pipeline() -> None:
    bad = [(m, i) for m, i in imports("actors") if i.split(".")[0] == "pipeline"]
    assert not bad


def actor_package_edges() -> set[tuple[str, str]]:
    edges = set()
    for module, imported in imports("actors"):
        target = imported.split(".")
        inside = len(module) > 2 and target[0] == "actors" and len(target) > 1
        if inside and module[1] != target[1]:
            edges.add((module[1], target[1]))
    return edges


def test_no_two_actor_packages_import_each_other() -> None:
    edges = actor_package_edges()
    assert ("generator", "drafts") in edges  # the check sees real edges
    cycles = sorted((a, b) for a, b in edges if (b, a) in edges and a < b)
    assert not cycles


def test_each_actor_has_its_own_package_with_an_actor_shell() -> None:
    for name in ("splitter", "estimator", "scheduler", "generator", "drafts", "trainer"):
        assert (ROOT / "actors" / name / "actor.py").is_file(), name
    loose = sorted(p.name for p in (ROOT / "actors").glob("*.py"))
    assert loose == ["__init__.py", "base.py", "options.py"]  # the runtime, beside the actors
