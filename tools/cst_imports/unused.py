"""Drop the imports a migration left unused, without whole-module scope analysis.

libcst's ``RemoveImportsVisitor`` decides "unused" from ``ScopeProvider`` metadata, built
for the whole module on every call: most of a migration's time on files that import
``torch.cuda`` or ``torch.backends.cudnn``. The engine only ever asks about a few names
it may have orphaned, so here one ``ast`` pass counts how each of them is bound and read:

- read nowhere (no load, and in no string libcst reads names from: an annotation, a
  ``TypeVar(...)``, ``__all__``) means unused;
- bound once, by a module-level import, and read somewhere means used: every read
  resolves to that import, whichever scope it is in;
- anything else (bound twice, deleted, declared ``global``, a dotted ``import a.b``) is
  left to libcst's scope analysis, for that file only.

The removal itself is still ``RemoveImportsVisitor``'s (its ``leave_Import`` and
``leave_ImportFrom``), so commas, parentheses and comments come out as they always did.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import libcst as cst
from torchport.sandbox import astparse

if TYPE_CHECKING:  # libcst.codemod imports libcst.matchers: a second of start-up, paid
    from libcst.codemod.visitors import RemoveImportsVisitor  # only by a file with removals

# (module, imported name or None for ``import module``, alias or None)
ImportSpec = tuple[str, str | None, str | None]


def remove_unused_imports(
    module: cst.Module, imports: Iterable[ImportSpec], code: str | None = None
) -> cst.Module:
    """``module`` without those of ``imports`` that nothing in it uses (``code``: the
    module's code, when the caller has it already)."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    imports = list(imports)
    context = CodemodContext()
    for name, obj, alias in imports:
        RemoveImportsVisitor.remove_unused_import(context, name, obj, alias)
    bound = [_bound_name(spec) for spec in imports]
    names = {name for name in bound if name is not None}
    unused = unused_names(code or module.code, names) if len(names) == len(set(bound)) else None
    remover = RemoveImportsVisitor(context)
    if unused is None or not hasattr(remover, "_unused_imports"):
        return remover.transform_module(module)
    return module.visit(_Remover(remover, unused))


def unused_names(source: str, names: set[str]) -> set[str] | None:
    """Which of ``names`` (each bound by an import in ``source``) nothing reads; None when
    that cannot be told without scope analysis."""
    try:
        tree = astparse.parse(source)
    except (SyntaxError, ValueError):
        return None
    uses = _NameUses()
    uses.visit(tree)
    module_level = _module_level_imports(tree.body)
    unused = set()
    for name in names:
        word = re.compile(rf"(?<!\w){re.escape(name)}(?!\w)")
        if name in uses.doubtful or any(word.search(s) for s in uses.strings):
            return None
        if not uses.loads[name]:
            unused.add(name)
        elif uses.bindings[name] != 1 or name not in module_level:
            return None
    return unused


def _bound_name(spec: ImportSpec) -> str | None:
    """The one plain name an import binds; None for ``import a.b`` (libcst then looks up
    ``a.b`` and ``a`` in its scopes, which is not a count of names)."""
    module, obj, alias = spec
    bound = alias or obj or module
    return bound if bound.isidentifier() else None


# Nodes that bind a name besides assignments and imports, and the field that holds it.
BINDS: dict[type, str] = {
    ast.FunctionDef: "name",
    ast.AsyncFunctionDef: "name",
    ast.ClassDef: "name",
    ast.ExceptHandler: "name",
    ast.MatchAs: "name",
    ast.MatchStar: "name",
    ast.MatchMapping: "rest",
    ast.arg: "arg",
}


class _NameUses(ast.NodeVisitor):
    """How often each name is read and bound anywhere in a module, and the strings that
    libcst reads names from (annotations, ``TypeVar`` calls, ``__all__``; a superset)."""

    def __init__(self) -> None:
        self.loads: Counter[str] = Counter()
        self.bindings: Counter[str] = Counter()
        self.doubtful: set[str] = set()  # deleted, augmented, global or nonlocal
        self.strings: list[str] = []
        self.typing: set[int] = set()  # ids of the subtrees whose strings name things
        self.depth = 0

    def visit(self, node: ast.AST) -> None:
        field = BINDS.get(type(node))
        if field and getattr(node, field):
            self.bindings[getattr(node, field)] += 1
        self._names_in(getattr(node, "returns", None), getattr(node, "annotation", None))
        inside = id(node) in self.typing
        self.depth += inside
        super().visit(node)
        self.depth -= inside

    def _names_in(self, *nodes: ast.AST | None) -> None:
        self.typing.update(id(n) for n in nodes if n is not None)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(_is_all(t) for t in node.targets):
            self._names_in(node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if _is_all(node.target):
            self._names_in(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "TypeVar" or (isinstance(func, ast.Attribute) and _is_all(func.value)):
            self._names_in(*node.args, *node.keywords)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.loads[node.id] += 1
        elif isinstance(node.ctx, ast.Del):
            self.doubtful.add(node.id)
        else:
            self.bindings[node.id] += 1

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.doubtful.add(node.target.id)
        if _is_all(node.target):
            self._names_in(node.value)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.doubtful.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.doubtful.update(node.names)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.bindings[alias.asname or alias.name.partition(".")[0]] += 1

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.bindings[alias.asname or alias.name] += 1

    def visit_Constant(self, node: ast.Constant) -> None:
        if self.depth and isinstance(node.value, str):
            self.strings.append(node.value)


def _is_all(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "__all__"


def _module_level_imports(body: list[ast.stmt]) -> set[str]:
    """The names imports bind in the module's own scope (inside ``if``/``try``/``with``
    too, never inside a function or class)."""
    found: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Import):
            found |= {a.asname or a.name.partition(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.ImportFrom):
            found |= {a.asname or a.name for a in stmt.names}
        elif not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody"):
                found |= _module_level_imports(getattr(stmt, field, []))
            for clause in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
                found |= _module_level_imports(clause.body)
    return found


class _Remover(cst.CSTTransformer):
    """``RemoveImportsVisitor``'s removal, told which names are unused instead of working
    it out; it skips expressions, where no import can be."""

    def __init__(self, libcst_remover: RemoveImportsVisitor, unused: set[str]) -> None:
        super().__init__()
        self.remover = libcst_remover
        self.unused = unused

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseExpression):
            return False
        if isinstance(node, cst.Import | cst.ImportFrom):
            self._mark(node)
            return False
        return True

    def _mark(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        if isinstance(node, cst.ImportFrom) and _is_future(node):
            return  # libcst never calls a __future__ import unused
        for alias in node.names:
            bound = alias.evaluated_alias or alias.evaluated_name
            if bound in self.unused:  # a dotted ``import a.b`` never is: it binds ``a``
                self.remover._unused_imports[alias] = node

    def leave_Import(
        self, original_node: cst.Import, updated_node: cst.Import
    ) -> cst.Import | cst.RemovalSentinel:
        return self.remover.leave_Import(original_node, updated_node)

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        return self.remover.leave_ImportFrom(original_node, updated_node)


def _is_future(node: cst.ImportFrom) -> bool:
    return isinstance(node.module, cst.Name) and node.module.value == "__future__"
