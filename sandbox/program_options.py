"""What a program's own argparse parser accepts, read from its source without running it.

Argument lowering (``sandbox.commandline``) shrinks a README's launch line to a short
run: ``--img-size 224`` becomes 64. A program whose parser says
``add_argument("--img-size", type=int, default=224, choices=[224, 384])`` then exits 2
before its first line of training, and a verdict blamed the original for it. So the
lowering reads the parser first: every ``add_argument`` call of the entry script and of
the repository's own modules it imports, with the option strings, ``choices`` (a literal
list, tuple or set, or ``range(...)`` of literals) and ``type`` each gives. Only literals
are read (``ast``), nothing is imported or run; what cannot be read statically is caught
at run time instead (the harness retries without a lowering the program refused).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import astparse

# How many of the repository's modules are read for a parser: the entry script and what it
# imports from the repository, breadth first. A parser lives near the entry point.
MAX_MODULES = 40
MAX_BYTES = 1 << 20  # a source file larger than this is not a parser's


@dataclass(frozen=True)
class Option:
    """One option as its ``add_argument`` call declares it."""

    strings: tuple[str, ...]  # ("-s", "--img-size")
    choices: tuple[str, ...] | None = None  # each as the command line spells it
    type: str = ""  # the name given as ``type=`` ("int", "float", "positive_int"), or ""
    where: str = ""  # file:line of the call

    def accepts(self, value: str) -> bool:
        """Whether ``value`` is one of the choices (an option without choices takes any)."""
        if self.choices is None:
            return True
        return any(_same(value, choice) for choice in self.choices)


def _same(value: str, choice: str) -> bool:
    if value == choice:
        return True
    try:
        return float(value) == float(choice)
    except ValueError:
        return False


def _literal_choices(node: ast.expr) -> tuple[str, ...] | None:
    """``choices=[224, 384]``, ``("a", "b")``, ``range(1, 9)``: the values as text; None
    for anything not a literal (a name, a call of the program's own)."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and not node.keywords
    ):
        try:
            bounds = [ast.literal_eval(a) for a in node.args]
        except ValueError:
            return None
        if all(isinstance(b, int) for b in bounds) and 1 <= len(bounds) <= 3:
            values = range(*bounds)
            return tuple(str(v) for v in values) if len(values) <= 100_000 else None
        return None
    try:
        values = ast.literal_eval(node)
    except ValueError:
        return None
    if isinstance(values, list | tuple | set | frozenset):
        return tuple(str(v) for v in values)
    return None


def _options_in(tree: ast.AST, where: str) -> Iterator[Option]:
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        strings = tuple(
            a.value
            for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        )
        if not strings:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        choices = _literal_choices(keywords["choices"]) if "choices" in keywords else None
        kind = keywords.get("type")
        type_name = kind.id if isinstance(kind, ast.Name) else ""
        yield Option(strings, choices, type_name, f"{where}:{node.lineno}")


def _local_imports(tree: ast.AST, root: Path, folder: Path) -> Iterator[Path]:
    """The repository's own modules ``tree`` imports (a name that is no file is not ours)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = folder if node.level else root
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            module = (node.module or "").split(".") if node.module else []
            names = [".".join([*module, a.name]) for a in node.names] + [".".join(module)]
            for name in names:
                yield from _module_files(base, name)
            continue
        else:
            continue
        for name in names:
            for base in (folder, root):
                yield from _module_files(base, name)


def _module_files(base: Path, name: str) -> Iterator[Path]:
    if not name:
        return
    path = base.joinpath(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            yield candidate


def entry_file(root: Path, program: list[str]) -> Path | None:
    """The file a program command starts in: ``["train.py", ...]`` or ``["-m", "pkg", ...]``
    (as ``harness.program_argv`` gives it), relative to ``root``; None when it is not there."""
    if not program:
        return None
    if program[0] == "-m":
        if len(program) < 2:
            return None
        path = root.joinpath(*program[1].split("."))
        candidates = [path / "__main__.py", path.with_suffix(".py")]
    else:
        candidates = [root / program[0]]
    return next((c for c in candidates if c.is_file()), None)


def program_options(root: Path, entry: Path | None) -> dict[str, Option]:
    """Every option string the program's parser declares -> its ``Option`` (the entry
    script's own declaration first, then its imports' in the order they are reached)."""
    if entry is None:
        return {}
    found: dict[str, Option] = {}
    seen: set[Path] = set()
    queue = [entry.resolve()]
    root = root.resolve()
    while queue and len(seen) < MAX_MODULES:
        path = queue.pop(0)
        if path in seen or not path.is_relative_to(root):
            continue
        seen.add(path)
        try:
            if path.stat().st_size > MAX_BYTES:
                continue
            tree = astparse.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue  # not a module Python can read: the program fails on its own
        for option in _options_in(tree, path.relative_to(root).as_posix()):
            for string in option.strings:
                found.setdefault(string, option)
        queue.extend(p.resolve() for p in _local_imports(tree, root, path.parent))
    return found
