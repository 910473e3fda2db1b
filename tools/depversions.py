"""Versions a program asserts of the packages it imports: ``assert timm.__version__ ==
"0.3.2"`` says the program runs with that release and no other, so ``--deps auto``
installs that release rather than the newest (read from the code, never run)."""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class Asserted:
    """``module`` (the top-level import) must be ``version``, as ``source`` asserts."""

    module: str
    version: str
    source: str  # "assert in main.py:4"


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> top-level module, for ``import timm`` and ``import timm as t``."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                names[alias.asname or top] = top if alias.asname is None else alias.name
    return {local: module.split(".")[0] for local, module in names.items()}


def _version_of(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The module whose ``__version__`` ``node`` reads (``timm.__version__``), or None."""
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "__version__"
        and isinstance(node.value, ast.Name)
    ):
        return aliases.get(node.value.id)
    return None


def _pinned(test: ast.expr, aliases: dict[str, str]) -> tuple[str, str] | None:
    """(module, version) when ``test`` is ``M.__version__ == "V"`` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    if not isinstance(test.ops[0], ast.Eq):
        return None
    left, right = test.left, test.comparators[0]
    for read, other in ((left, right), (right, left)):
        module = _version_of(read, aliases)
        if module and isinstance(other, ast.Constant) and isinstance(other.value, str):
            return module, other.value.strip()
    return None


def asserted_versions(tree: ast.Module, rel: str) -> list[Asserted]:
    """Each ``assert M.__version__ == "V"`` of a module ``tree`` imports."""
    aliases = _aliases(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and (pinned := _pinned(node.test, aliases)):
            found.append(Asserted(*pinned, f"assert in {rel}:{node.lineno}"))
    return found
