"""The imports a module makes, as (module, name, alias) facts every edit lane reads alike.

The codemods drop CUDA imports an edit orphaned, the LLM lane drops a CUDA-only library's
imports once nothing uses them, and the library fixers map a local alias back to the
library's own name (``import xformers.ops as xops``): each used to walk the imports with
its own visitor, and they disagreed at the edges (relative imports, ``import *``, a plain
``import a.b``). Here one walk answers all three.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import libcst as cst


def code_of(node: cst.CSTNode) -> str:
    """A node's source text (without the module around it)."""
    return cst.Module(body=[]).code_for_node(node)


class ImportedName(NamedTuple):
    """One name an import binds: ``from module import name as asname``, or
    ``import module as asname`` (``name`` None). A tuple, so libcst's
    ``RemoveImportsVisitor.remove_unused_import(context, *spec)`` takes it as is."""

    module: str
    name: str | None
    asname: str | None

    @property
    def qualified(self) -> str:
        """What the bound name stands for: ``xformers.ops`` for ``import xformers.ops as
        xops``, ``apex.optimizers.FusedAdam`` for ``from apex.optimizers import FusedAdam``."""
        return f"{self.module}.{self.name}" if self.name else self.module

    @property
    def bound(self) -> str:
        """The local name: the alias, the imported name, or for a plain ``import a.b`` the
        top package ``a`` (which is what such an import binds)."""
        return self.asname or self.name or self.module.split(".")[0]


def under(roots: tuple[str, ...]) -> Callable[[str], bool]:
    """A module filter: ``roots`` themselves and their submodules (``apex`` and
    ``apex.optimizers``, not ``apexlike``)."""
    return lambda module: any(module == r or module.startswith(r + ".") for r in roots)


def gather_imports(node: cst.CSTNode, wanted: Callable[[str], bool]) -> list[ImportedName]:
    """Every absolute import anywhere in ``node`` (nested blocks and functions too) whose
    module ``wanted`` accepts, in source order; ``import *`` binds no name and is left out."""
    found = _Imports(wanted)
    node.visit(found)
    return found.names


def module_imports(module: cst.Module) -> Iterator[cst.Import | cst.ImportFrom]:
    """The import statements at module level, in order."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from (s for s in statement.body if isinstance(s, cst.Import | cst.ImportFrom))


def modules_named(statement: cst.CSTNode) -> list[str]:
    """Every module a top-level import statement names (``from a import b``: ``a``)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    found = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            found += [code_of(a.name) for a in small.names]
        elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            found.append(code_of(small.module))
    return found


class _Imports(cst.CSTVisitor):
    def __init__(self, wanted: Callable[[str], bool]) -> None:
        self.wanted = wanted
        self.names: list[ImportedName] = []

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.module is None or node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = code_of(node.module)
        if self.wanted(module):
            for alias in node.names:
                self.names.append(ImportedName(module, code_of(alias.name), _asname(alias)))

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            module = code_of(alias.name)
            if self.wanted(module):
                self.names.append(ImportedName(module, None, _asname(alias)))


def _asname(alias: cst.ImportAlias) -> str | None:
    return code_of(alias.asname.name) if alias.asname else None
