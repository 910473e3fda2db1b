"""Imports added where a person would put them, for the codemods and the LLM lane alike.

libcst's AddImportsVisitor looks only at the first run of imports: a module whose imports
continue after a ``try: import x / except ImportError`` block (yolov5's ``comet_ml``
before ``import torch``) got a second ``import torch`` above the block, and the new
``import time`` landed after ``import torch``. Here an import already made at module level
is reused, and a new one joins its group: the standard library's imports, the ``torch``
family's, or everyone else's.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Sequence

import libcst as cst

from .gather import ImportedName, code_of, modules_named


def _bound(statement: cst.CSTNode) -> set[ImportedName]:
    """What a top-level import statement imports, as the facts ``add_imports`` compares."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return set()
    return {
        ImportedName(code_of(small.module), code_of(a.name), _alias(a))
        if isinstance(small, cst.ImportFrom) and small.module is not None
        else ImportedName(code_of(a.name), None, _alias(a))
        for small in statement.body
        if isinstance(small, cst.Import | cst.ImportFrom)
        and not isinstance(small.names, cst.ImportStar)
        and not (isinstance(small, cst.ImportFrom) and small.relative)
        for a in small.names
    }


def _alias(alias: cst.ImportAlias) -> str | None:
    return code_of(alias.asname.name) if alias.asname else None


def _group(module: str) -> str:
    top = module.split(".")[0]
    if top == "__future__":
        return "future"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "torch" if top in ("torch", "torch_xla") else "other"


def _position(body: Sequence[cst.CSTNode], module: str) -> tuple[int, str]:
    """Where an import of ``module`` goes and how it joins: after the last import of its
    own group ("join"); a stdlib import with none yet, before the first other import
    ("before"); a torch import with none yet, as a group of its own after the stdlib's
    ("group")."""
    group = _group(module)
    same = [i for i, s in enumerate(body) if any(_group(m) == group for m in modules_named(s))]
    if same:
        return same[-1] + 1, "join"
    imports = [i for i, s in enumerate(body) if modules_named(s)]
    groups = {i: {_group(m) for m in modules_named(body[i])} for i in imports}
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


def _bound_name(spec: ImportedName) -> str:
    """The name an import binds: ``import a.b`` binds ``a``."""
    return spec.asname or spec.name or spec.module.split(".")[0]


def _first_use(body: Sequence[cst.CSTNode], spec: ImportedName) -> int | None:
    """The first top-level statement other than an import that reads the name ``spec``
    binds: a script whose imports go on after its code (``sys.modules[...] = ...`` then
    ``from lltm import LLTM``) would otherwise get the new import after the line that
    needs it."""
    bound = _bound_name(spec)

    class Reads(cst.CSTVisitor):
        found = False

        def visit_Name(self, node: cst.Name) -> None:
            self.found = self.found or node.value == bound

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)  # ``x.name`` reads x, not name
            return False

    for i, statement in enumerate(body):
        if modules_named(statement):
            continue
        reads = Reads()
        statement.visit(reads)
        if reads.found:
            return i
    return None


def _statement(spec: ImportedName) -> cst.SimpleStatementLine:
    alias = f" as {spec.asname}" if spec.asname else ""
    what = f"from {spec.module} import {spec.name}" if spec.name else f"import {spec.module}"
    statement = cst.parse_statement(f"{what}{alias}\n")
    assert isinstance(statement, cst.SimpleStatementLine)  # one import is one simple line
    return statement


def add_imports(module: cst.Module, needed: Collection[str | ImportedName]) -> cst.Module:
    """``module`` with each ``needed`` import it does not make at module level yet; a plain
    string ``name`` means ``import name``."""
    body = list(module.body)
    present = {spec for statement in body for spec in _bound(statement)}
    wanted = {ImportedName(n, None, None) if isinstance(n, str) else n for n in needed}
    for spec in sorted(wanted - present, key=lambda s: (s.module, s.name or "", s.asname or "")):
        at, how = _position(body, spec.module)
        # a name the module binds already (``import torch`` for ``import torch.nn.x``) is
        # read before the new import anyway
        fresh = _bound_name(spec) not in {_bound_name(p) for p in present}
        used = _first_use(body, spec) if fresh else None
        if used is not None and used < at:  # its group goes on below code that uses it
            at, how = _position(body[:used], spec.module)
        statement = _statement(spec)
        if how == "before":  # it opens the imports there: it takes their blank lines
            statement = statement.with_changes(leading_lines=body[at].leading_lines)
            body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine()])
        elif how == "group" and at > 0:
            statement = statement.with_changes(leading_lines=[cst.EmptyLine()])
        else:  # joins the group above; the next statement keeps its own blank lines
            statement = statement.with_changes(leading_lines=())
        body.insert(at, statement)
    return module.with_changes(body=body)
