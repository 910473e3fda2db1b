"""Imports the codemods need, placed where a person would put them.

libcst's AddImportsVisitor looks only at the first run of imports: a module whose imports
continue after a ``try: import x / except ImportError`` block (yolov5's ``comet_ml``
before ``import torch``) got a second ``import torch`` above the block, and the new
``import time`` landed after ``import torch``. Here an import already made anywhere at
module level is reused, and a new one joins its group: the standard library's imports,
or the ``torch`` family's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import libcst as cst

from .base import code_of


def _imported(statement: cst.CSTNode) -> list[str]:
    """The modules a top-level ``import a, b.c`` statement binds by their full names."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return []
    found = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            found += [code_of(a.name) for a in small.names if a.asname is None]
    return found


def _modules(statement: cst.CSTNode) -> list[str]:
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


def _group(module: str) -> str:
    top = module.split(".")[0]
    if top == "__future__":
        return "future"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "torch" if top in ("torch", "torch_xla") else "other"


def _position(body: list[cst.CSTNode], name: str) -> tuple[int, str]:
    """Where ``import name`` goes and how it joins: after the last import of its own group
    ("join"); a stdlib import with none yet, before the first other import ("before"); a
    torch import with none yet, as a group of its own after the stdlib's ("group")."""
    group = _group(name)
    same = [i for i, s in enumerate(body) if any(_group(m) == group for m in _modules(s))]
    if same:
        return same[-1] + 1, "join"
    imports = [i for i, s in enumerate(body) if _modules(s)]
    groups = {i: {_group(m) for m in _modules(body[i])} for i in imports}
    if group == "stdlib":
        later = [i for i in imports if groups[i] <= {"other", "torch"}]
        if later:
            return later[0], "before"
    if group == "torch":
        earlier = [i for i in imports if groups[i] & {"stdlib", "future"}]
        if earlier:
            return earlier[-1] + 1, "group"
    if imports:
        return imports[-1] + 1, "group"
    start = 0
    if body and isinstance(body[0], cst.SimpleStatementLine):
        first = body[0].body[0]
        if isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString):
            start = 1  # after the docstring
    return start, "before" if start < len(body) else "join"


def add_imports(module: cst.Module, needed: set[str]) -> cst.Module:
    """``module`` with ``import name`` for each needed name it does not import yet."""
    body = list(module.body)
    present = {name for statement in body for name in _imported(statement)}
    for name in sorted(needed - present):
        at, how = _position(body, name)
        statement = cst.parse_statement(f"import {name}\n")
        if how == "before":  # it opens the imports there: it takes their blank lines
            statement = statement.with_changes(leading_lines=body[at].leading_lines)
            body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine()])
        elif how == "group" and at > 0:
            statement = statement.with_changes(leading_lines=[cst.EmptyLine()])
        else:  # joins the group above; the next statement keeps its own blank lines
            statement = statement.with_changes(leading_lines=())
        body.insert(at, statement)
    return module.with_changes(body=body)


def module_imports(module: cst.Module) -> Iterator[cst.Import | cst.ImportFrom]:
    """The import statements at module level, in order."""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            yield from (s for s in statement.body if isinstance(s, cst.Import | cst.ImportFrom))


def torch_alias(module: cst.Module) -> str | None:
    """``th`` for a file that does ``import torch as th`` at module level and never imports
    plain ``torch``: the name its code already uses for torch."""
    aliases = []
    for small in module_imports(module):
        if isinstance(small, cst.Import):
            for alias in small.names:
                if code_of(alias.name) == "torch" and alias.asname is None:
                    return None
                if code_of(alias.name) == "torch" and isinstance(alias.asname.name, cst.Name):
                    aliases.append(alias.asname.name.value)
    return aliases[0] if aliases else None


def _opens_file(statement: cst.CSTNode) -> bool:
    """A statement of the file's opening run: its docstring, imports, and ``try:`` / ``if``
    blocks that only import (``try: import x / except ImportError: x = None``)."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(
            isinstance(s, cst.Import | cst.ImportFrom)
            or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString))
            for s in statement.body
        )
    if isinstance(statement, cst.Try | cst.If):
        return any(_modules(s) for s in statement.body.body)
    return False


def add_definitions(module: cst.Module, definitions: dict[str, str]) -> cst.Module:
    """``module`` with each top-level function of ``definitions`` it lacks, after the
    imports that open the file, two blank lines around each (as PEP 8 spaces them)."""
    body = list(module.body)
    have = {s.name.value for s in body if isinstance(s, cst.FunctionDef | cst.ClassDef)}
    new = [code for name, code in sorted(definitions.items()) if name not in have]
    if not new:
        return module
    at = 0
    while at < len(body) and _opens_file(body[at]):
        at += 1
    blank = [cst.EmptyLine(), cst.EmptyLine()]
    functions = [cst.parse_statement(code).with_changes(leading_lines=blank) for code in new]
    if at < len(body):  # the next statement keeps its comments, after two blank lines
        own = list(body[at].leading_lines)
        while own and own[0].comment is None:
            own.pop(0)
        body[at] = body[at].with_changes(leading_lines=[*blank, *own])
    return module.with_changes(body=[*body[:at], *functions, *body[at:]])
