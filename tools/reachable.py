"""The repository's own modules that running its entry point can import.

A repository often holds code its training never runs: an exporter to TensorFlow or
CoreML, a demo for another framework. Their imports are no requirement of the run, and
asking pip for all of them at once (tensorflow, paddle, openvino...) makes it backtrack
without end. So the dependencies are read from what the entry reaches: its script, then
every module of the repository it imports, found the way Python would find it (the
script's folder, then the root and ``src/`` as ``sandbox.pythonpath`` puts them), with
relative imports and packages' ``__init__`` files followed too.

The program's own script runs all of its imports (its ``main()`` runs); a module it
imports runs those at its top level when imported, and the ones inside its functions
only if the run calls them: lazy imports, which is how a library keeps an optional need
optional (``models/common.py`` of yolov5 imports ``export`` only to load an exported
model). So a module's function-level imports are not followed, nor read as requirements
(``depresolve``): if a run does reach one, its ModuleNotFoundError names what is missing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..sandbox.pythonpath import layout_paths


def _module_file(name: str, paths: list[Path]) -> Path | None:
    """The file Python runs for the dotted ``name``: ``a/b.py`` or ``a/b/__init__.py``."""
    parts = name.split(".")
    for base in paths:
        folder = base.joinpath(*parts)
        for candidate in (folder.with_name(f"{parts[-1]}.py"), folder / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _with_parents(name: str) -> list[str]:
    """``a.b.c`` imports ``a``, ``a.b`` and ``a.b.c``, each package's ``__init__`` run."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _package_of(module: str, path: Path) -> str:
    """The package a relative import in ``module`` starts from."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def lazy_imports(tree: ast.Module) -> set[int]:
    """ids of the nodes inside a function: they run only if that function is called."""
    return {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for sub in ast.walk(node)
        if sub is not node
    }


def _imported_names(tree: ast.Module, module: str, path: Path, lazy: bool) -> list[str]:
    """Dotted names the module's import statements may load (a ``from a import b`` may load
    the submodule ``a.b``; a name that is no module is simply not found); without ``lazy``,
    only the statements that importing the module runs."""
    skipped = set() if lazy else lazy_imports(tree)
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module, path).split(".") if module else []
                if node.level - 1 >= len(package):
                    continue  # beyond the top package, or in the script: fails at run time
                kept = package[: len(package) - (node.level - 1)]
                base = ".".join([*kept, *([base] if base else [])])
            if base:
                names.append(base)
            names += [f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*"]
    return names


@dataclass(frozen=True)
class Reached:
    """The repository's files the entry may import, and the one it runs as ``__main__``."""

    files: frozenset[Path]
    main: Path


def reachable_files(
    root: Path, program: list[str], parse: Callable[[Path], ast.Module | None]
) -> Reached | None:
    """The repository's Python files that running ``program`` (as ``program_argv`` gives
    it: ``["train.py", ...]`` or ``["-m", "pkg", ...]``) may import; None when the entry is
    no Python file of the repository (a notebook, a shell script), where nothing can be
    followed. ``parse`` gives a file's tree (None for one that cannot be read)."""
    root = root.resolve()
    layout = layout_paths(root)
    todo: list[tuple[Path, str]] = []
    main: Path | None
    if program[:1] == ["-m"] and len(program) > 1:
        paths = [root, *layout]
        for name in _with_parents(program[1]):
            found = _module_file(name, paths)
            if found is not None:
                todo.append((found.resolve(), name))
        dunder_main = _module_file(f"{program[1]}.__main__", paths)
        if dunder_main is not None:
            todo.append((dunder_main.resolve(), f"{program[1]}.__main__"))
        main = todo[-1][0] if todo else None
    elif program and program[0].endswith(".py"):
        script = (root / program[0]).resolve()
        if not script.is_file() or not script.is_relative_to(root):
            return None
        paths = [script.parent, *layout]
        todo.append((script, ""))
        main = script
    else:
        return None
    if main is None:
        return None
    seen: set[Path] = set()
    while todo:
        path, module = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = parse(path)
        if tree is None:
            continue
        for name in _imported_names(tree, module, path, lazy=path == main):
            for dotted in _with_parents(name):
                found = _module_file(dotted, paths)
                if found is not None and found.resolve().is_relative_to(root):
                    todo.append((found.resolve(), dotted))
    return Reached(frozenset(seen), main)
