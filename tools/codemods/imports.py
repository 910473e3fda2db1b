"""What the codemods read from a file's imports (torch's local alias), and the helper
functions they add after them. Adding and removing imports is tools/cst_imports'."""

from __future__ import annotations

import libcst as cst
from torchport.tools.cst_imports import module_imports, modules_named

from .base import code_of


def torch_alias(module: cst.Module) -> str | None:
    """``th`` for a file that does ``import torch as th`` at module level and never imports
    plain ``torch``: the name its code already uses for torch."""
    aliases = []
    for small in module_imports(module):
        if isinstance(small, cst.Import):
            for alias in small.names:
                if code_of(alias.name) != "torch":
                    continue
                if alias.asname is None:
                    return None
                if isinstance(alias.asname.name, cst.Name):
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
        return any(modules_named(s) for s in statement.body.body)
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
