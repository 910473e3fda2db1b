"""Resolve names in a module to the qualified names they were imported as.

Rules match qualified names (``torch.backends.cudnn.benchmark``), not spellings
(``cudnn.benchmark`` after ``import torch.backends.cudnn as cudnn``). The
resolver is deliberately file-global: imports anywhere in the module (training
scripts often import inside ``main()``) bind their alias for the whole file.
That is cheaper than libcst's scope analysis by two orders of magnitude and, for
import aliases, wrong only when a local variable shadows an imported name.
"""

from __future__ import annotations

import ast


def collect_aliases(tree: ast.AST) -> dict[str, str]:
    """Map each locally bound import name to the qualified name it stands for."""
    aliases: dict[str, str] = {}
    star = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".", 1)[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name == "*":
                    star = True
                    continue
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    if star:
        # `from utils import *` where utils imports torch: `torch.load` is still torch's, and a
        # migration that adds `import torch` must not make a second pass find new constructs
        aliases.setdefault("torch", "torch")
    return aliases


def module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to a module object by a plain ``import`` (``import a.b as c``, ``import a``).

    A bare reference to such a name (``if xops is None``) uses no API of the module.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".", 1)[0] for a in node.names)
    return names


def dotted_parts(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None when the chain is not rooted in a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    parts.reverse()
    return parts


def qualified_name(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The qualified name of a Name/Attribute chain whose root was imported, else None."""
    parts = dotted_parts(node)
    if not parts:
        return None
    base = aliases.get(parts[0])
    if base is None:
        return None
    return ".".join([base, *parts[1:]])


def imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Modules an import statement touches; ``from a import b`` yields ``a`` and ``a.b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    return [node.module] + [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
