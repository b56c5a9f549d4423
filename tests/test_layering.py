"""The import graph follows the layering: transport <- actors <- pipeline, the actor packages
never import each other in both directions, pipeline's wings import only downwards, no two
modules import each other (directly or round a loop), and no module is over 600 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).parents[1]
TOPS = ("transport", "actors", "pipeline")
MAX_LINES = 600


# pipeline's wings, low to high: a module imports only from its own wing or lower ones
WINGS = (
    ("config", "logs"),
    ("launch",),
    ("records",),
    ("rollout",),
    ("tasks",),
    ("serve",),
    ("rl",),
    ("sim",),
    ("bench",),
    ("cli",),
)


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


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of transport/, actors/ and pipeline/ (a package is its `__init__`)."""
    return {module_name(p): p for top in TOPS for p in sorted((ROOT / top).rglob("*.py"))}


@cache
def graph() -> dict[str, frozenset[str]]:
    """module -> the modules it imports (anywhere in it, absolute imports), within the three
    trees. `from pkg import name` is an edge to `pkg.name` when that is a module, else to
    `pkg`."""
    mods = modules()
    out: dict[str, frozenset[str]] = {}
    for name, path in mods.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in mods else node.module)
        out[name] = frozenset(t for t in targets if t in mods and t != name)
    return out


def edges(source: str, target: str) -> list[tuple[str, str]]:
    """Imports from `source` (a module or a package and everything in it) into `target`."""

    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    return sorted(
        (m, t) for m, ts in graph().items() if under(m, source) for t in ts if under(t, target)
    )


def cycles(g: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module of `g` (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


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
    # the runtime, and the optional dependencies (extras.py)
    assert loose == ["__init__.py", "base.py", "errors.py", "extras.py", "options.py"]


def test_no_import_cycle_between_modules() -> None:
    edge = ("actors.generator.actor", "actors.generator.options")
    assert edge in edges(*edge)  # the graph sees real edges
    assert not cycles(graph())


def test_the_cycle_finder_finds_a_loop() -> None:
    loop = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a", "d"})}
    assert cycles({**loop, "d": frozenset()}) == [["a", "b", "c"]]


def test_an_engine_takes_a_config_of_its_own_not_the_generator_options() -> None:
    """The built-in and SGLang engines never see the generator actor's options (the actor
    builds each engine's config from them): no options <-> engine loop."""
    for engine in ("actors.generator.builtin", "actors.generator.sglang"):
        assert not edges(engine, "actors.generator.options")
        assert not edges(engine, "actors.generator.actor")


def test_the_scheduler_reaches_the_trainer_only_through_the_dispatcher() -> None:
    assert edges("actors.scheduler", "actors.dispatcher")  # the check sees real edges
    assert not edges("actors.scheduler", "actors.trainer")
    assert not edges("actors.dispatcher", "actors.scheduler")
    assert not edges("actors.trainer", "actors.dispatcher")  # scheduler -> dispatcher -> trainer


def test_the_trainer_imports_nothing_from_the_generator() -> None:
    assert not edges("actors.trainer", "actors.generator")  # sampling: actors.model.sampling


def test_serve_imports_neither_the_rl_recipe_nor_the_trainer() -> None:
    for target in ("pipeline.rl", "pipeline.tasks.warmstart", "actors.trainer"):
        assert not edges("pipeline.serve", target), target


def test_the_rollout_api_does_not_pull_the_trainer() -> None:
    assert not edges("pipeline.rollout", "actors.trainer")


def test_the_simulator_imports_nothing_from_the_benches() -> None:
    assert not edges("pipeline.sim", "pipeline.bench")


def wing(module: str) -> int:
    """The rank of `module`'s wing in `WINGS` (`pipeline` itself sits below them all)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    ranks = [i for i, names in enumerate(WINGS) if parts[1] in names]
    assert ranks, f"{module} is in no wing of WINGS"
    return ranks[0]


def test_pipeline_wings_import_only_downwards() -> None:
    """`pipeline` itself is exempt: a facade whose names load on first use, importing
    nothing at import time (tests/test_packaging.py checks that)."""
    upward = [
        (m, t)
        for m, ts in graph().items()
        if m.split(".")[0] == "pipeline" and m != "pipeline"
        for t in ts
        if t.split(".")[0] == "pipeline" and wing(t) > wing(m)
    ]
    assert not upward, sorted(set(upward))


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT))
        for p in modules().values()
        if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert not long, sorted(long)
