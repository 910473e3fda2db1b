"""The import graph of torchport's own code: no cycles, the layers as docs/layout.md
draws them, and no module reached by a string the tools cannot follow.

Read from the source (every ``import`` statement, also inside functions and under
``TYPE_CHECKING``), never by importing it, so a cycle that only a lazy import hides
still counts: it is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "tools", "sandbox", "evals", "prompts", "cli")
NOT_CODE = ("evals/suite",)  # the suite's CUDA projects are data, not torchport's modules
# Which top-level packages each may not import: the lower layers know nothing above them.
FORBIDDEN = {
    "tools": {"agents", "cli", "evals"},
    "sandbox": {"agents", "cli", "evals"},
    "prompts": {"agents", "cli", "evals", "tools", "sandbox"},
    "agents": {"cli"},
    "evals": {"cli"},
}
STRING_IMPORTS = ("import_module", "__import__")


def _module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.as_posix().startswith(NOT_CODE) or not (path.parent / "__init__.py").is_file():
                continue
            parts = rel.with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            name = ".".join(("torchport", *parts))
            modules[name] = path
    return modules


MODULES = _module_files()


def _imported(name: str, path: Path, tree: ast.Module) -> Iterator[str]:
    """The torchport modules ``name`` imports (``from pkg import mod`` names ``pkg.mod``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _with_packages(importer: str, module: str) -> set[str]:
    """``module`` and the packages above it: importing ``a.b.c`` runs ``a/b/__init__.py``
    first. Packages above the importer itself are left out: they are being imported
    already when it runs (a package's ``__init__`` importing its own modules is no cycle)."""
    parts = module.split(".")
    packages = {".".join(parts[:i]) for i in range(2, len(parts))}
    own = {".".join(importer.split(".")[:i]) for i in range(2, importer.count(".") + 2)}
    return {module} | (packages - own)


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        found = {p for m in _imported(name, path, tree) for p in _with_packages(name, m)}
        graph[name] = {m for m in found if m in MODULES and m != name}
    return graph


GRAPH = _graph()


def _top(module: str) -> str:
    return module.split(".")[1]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle of each strongly connected component that has one (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for child in sorted(graph[node] & component):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                frontier.append(child)
    raise AssertionError(f"no cycle in {component}")  # a component of size > 1 has one


def test_the_walk_sees_every_package_and_follows_relative_imports() -> None:
    assert {_top(m) for m in MODULES} == set(PACKAGES)
    assert "torchport.tools.catalogue" in GRAPH["torchport.tools.scanner"]  # from .catalogue
    assert "torchport.sandbox.harness" in GRAPH["torchport.agents.verifier"]  # absolute
    # ``from ..emulator import backend`` runs sandbox/emulator/__init__.py too
    assert "torchport.sandbox.emulator" in GRAPH["torchport.sandbox.native.register"]
    # a package importing its own modules is not an edge back to itself
    assert "torchport.sandbox.emulator" not in GRAPH["torchport.sandbox.emulator.tensor"]


def test_the_cycle_finder_names_a_cycle() -> None:
    """The finder itself can fail: a made-up graph with one cycle, one path out of it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_top_level_package_imports_itself_back() -> None:
    packages: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, imported in GRAPH.items():
        packages[_top(module)] |= {_top(m) for m in imported} - {_top(module)}
    cycles = _cycles(packages)
    assert not cycles, "package cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_lower_layer_imports_nothing_above_it(package: str) -> None:
    wrong = sorted(
        f"{module} imports {imported}"
        for module, targets in GRAPH.items()
        if _top(module) == package
        for imported in targets
        if _top(imported) in FORBIDDEN[package]
    )
    assert not wrong, "\n".join(wrong)


def test_no_torchport_module_is_imported_by_a_string() -> None:
    """``importlib.import_module("torchport.x")`` hides an edge from this test, from ruff
    and from a reader; a literal name can always be a plain import."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                called in STRING_IMPORTS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and first.value.startswith(("torchport", "."))
            ):
                found.append(f"{name}:{node.lineno} {called}({first.value!r})")
    assert not found, "\n".join(found)
