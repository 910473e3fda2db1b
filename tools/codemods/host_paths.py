"""The files a ``load(sources=[...])`` call names, read without running the code.

A migration cannot run the program, but the source paths an extension is built from are
usually spelled from ``__file__`` and literals: ``os.path.join(os.path.dirname(
os.path.abspath(__file__)), "csrc", "x.cu")``, ``Path(__file__).parent / "x.cu"``, or a
name holding such a path (``here = os.path.dirname(os.path.abspath(__file__))`` at module
level or in the function that calls ``load``). ``sources`` follows exactly those
spellings (and a relative literal, which ``load`` reads from the working directory, taken
as the repository's root) to paths in the repository; anything else is a reason, not a
guess. A name is followed only where every binding of it in the module is the same plain
assignment: a parameter, a loop variable or a second, different value makes it unknown.
"""

from __future__ import annotations

import posixpath
from pathlib import PurePosixPath

import libcst as cst

from .base import code_of

VALUES = "tpk002_values"  # the prescan's unambiguous assignments, by name
_SAME = ("os.path.abspath", "os.path.realpath", "os.path.normpath", "str", "Path", "pathlib.Path")
_METHODS_SAME = ("resolve", "absolute")


class _Bindings(cst.CSTVisitor):
    """Every ``NAME = value`` of a module, at any depth, and every other way it binds a
    name (which makes that name's value unknown here)."""

    def __init__(self) -> None:
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self.other: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.assigned.setdefault(target.target.value, []).append(node.value)
            else:
                self._names(target.target)

    def _names(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            self.other.add(node.value)
        elif isinstance(node, cst.Tuple | cst.List):
            for element in node.elements:
                self._names(element.value)
        elif isinstance(node, cst.StarredElement):
            self._names(node.value)

    def visit_Param(self, node: cst.Param) -> None:
        self.other.add(node.name.value)

    def visit_For(self, node: cst.For) -> None:
        self._names(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._names(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._names(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._names(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._names(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._names(node.name)


def assignments(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """The names whose every binding in ``module`` is ``NAME = <the same expression>``,
    with that expression."""
    bindings = _Bindings()
    module.visit(bindings)
    found = {}
    for name, values in bindings.assigned.items():
        if name not in bindings.other and len({code_of(v) for v in values}) == 1:
            found[name] = values[0]
    return found


def _join(parts: list[str | None]) -> str | None:
    if any(p is None for p in parts):
        return None
    return posixpath.join(*[p for p in parts if p is not None])


def _path(
    node: cst.BaseExpression, values: dict[str, cst.BaseExpression], here: str, depth: int = 0
) -> str | None:
    """``node`` as a path relative to the repository's root, or None."""
    if depth > 8:
        return None
    again = lambda n: _path(n, values, here, depth + 1)  # noqa: E731 - one line, one use
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) and not value.startswith("/") else None
    if isinstance(node, cst.Name):
        if node.value == "__file__":
            return here
        return again(values[node.value]) if node.value in values else None
    if isinstance(node, cst.Attribute):
        dotted = code_of(node)
        if dotted == "os.pardir":
            return ".."
        if dotted == "os.curdir":
            return "."
        if node.attr.value == "parent":
            inner = again(node.value)
            return None if inner is None else posixpath.dirname(posixpath.normpath(inner))
        return None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
        return _join([again(node.left), again(node.right)])
    if isinstance(node, cst.Call) and not any(a.keyword or a.star for a in node.args):
        func = code_of(node.func)
        args = [again(a.value) for a in node.args]
        if func == "os.path.join" and args:
            return _join(args)
        if func == "os.path.dirname" and len(args) == 1 and args[0] is not None:
            return posixpath.dirname(posixpath.normpath(args[0]))
        if func in _SAME and len(args) == 1:
            return args[0]
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in _METHODS_SAME:
            return again(node.func.value) if not node.args else None
    return None


def sources(
    node: cst.BaseExpression, values: dict[str, cst.BaseExpression], here: PurePosixPath
) -> list[PurePosixPath] | str:
    """The repository paths of ``load``'s ``sources`` argument (a path, or a list or tuple
    of them); a reason when one cannot be known without running the code."""
    elements = (
        [e.value for e in node.elements] if isinstance(node, cst.List | cst.Tuple) else [node]
    )
    found = []
    for element in elements:
        path = _path(element, values, here.as_posix())
        if path is None:
            return f"its source {code_of(element)} is not a path known without running the code"
        normal = posixpath.normpath(path)
        if normal.startswith(".."):
            return f"its source {code_of(element)} is outside the repository"
        found.append(PurePosixPath(normal))
    return found
