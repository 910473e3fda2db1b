"""CUDA-event timing becomes ``synchronize()`` + ``time.perf_counter()`` (TPT002).

TorchTPU's experimental events mark only pending host copies, so timing must not rely on
them. The fixer notes which variables held events, and a follow-up rewrites their uses:
``e.record()`` becomes a synchronize then a timestamp, ``a.elapsed_time(b)`` becomes
``(b - a) * 1000.0`` (milliseconds, as CUDA reported; ``elapsed_time(b) / 1000`` becomes ``b - a``),
``e.synchronize()``/``e.wait()`` a synchronize, ``e.query()`` True.

One synchronize per timestamp: a ``record()`` right after a synchronize takes only the
timestamp, and a synchronize right after a ``record()`` goes (the record's own synchronize
came just before its timestamp; nothing was queued since). Unit conversions that cancel are
folded: ``elapsed_time(b) / 1000`` and ``1e-3 * elapsed_time(b)`` (seconds) become ``b - a``.

Scoping is kept: an event variable whose first use is its ``record()`` in the same scope
loses its constructor line (the timestamp binds it), and a ``record()`` inside a nested
function declares the variable ``nonlocal`` (or ``global``) there, so the enclosing code
reads the time it recorded instead of a local that vanishes.
"""

from __future__ import annotations

from typing import TypeGuard

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    NotApplicable,
    code_of,
    dotted,
    fixer,
    follow_up,
    prescan,
    sync_call,
)

HOLDERS = "event_holders"
UNNEEDED = "event_constructors_to_drop"  # ids of ``e = Event()`` lines the record() binds
DECLARE = "event_declarations"  # id(FunctionDef) -> (keyword, names) to declare in it
SECONDS = ("1000", "1000.0", "1e3", "1000.")  # elapsed_time(e) / these: seconds
MILLI = ("1e-3", "0.001", ".001", "1e-03", "1E-3")  # elapsed_time(e) * these: seconds
SYNCS = ("cuda.synchronize", "accelerator.synchronize", "torch_xla.sync")  # th.cuda... too


def _base(node: cst.BaseExpression) -> str:
    """``starts[i]`` -> ``starts``; ``self.start`` -> ``self.start``."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return code_of(node)


def _targets(node: cst.CSTNode) -> list[str]:
    if isinstance(node, cst.Tuple | cst.List):
        return [t for e in node.elements for t in _targets(e.value)]
    return [code_of(node)]


class _Timing(cst.CSTVisitor):
    """Where each event variable is bound and where its ``record()`` calls are."""

    METADATA_DEPENDENCIES = (PositionProvider, ParentNodeProvider)

    def __init__(self, lines: set[int]) -> None:
        self.lines = lines
        self.bound: dict[tuple[str, int], cst.Assign] = {}  # (name, id(scope)) -> its line
        self.scopes: dict[int, cst.CSTNode | None] = {}
        self.uses: list[tuple[str, list[cst.CSTNode | None], bool]] = []  # scopes inner first

    def _scopes(self, node: cst.CSTNode) -> list[cst.CSTNode | None]:
        found: list[cst.CSTNode | None] = []
        current: cst.CSTNode | None = node
        while current is not None:
            if isinstance(current, cst.FunctionDef | cst.Lambda):
                found.append(current)
            current = self.get_metadata(ParentNodeProvider, current, None)
        return [*found, None]

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        line = self.get_metadata(PositionProvider, node).start.line
        if isinstance(target, cst.Name) and line in self.lines:
            scope = self._scopes(node)[0]
            self.scopes[id(scope)] = scope
            self.bound.setdefault((target.value, id(scope)), node)

    def visit_Name(self, node: cst.Name) -> None:
        if not any(name == node.value for name, _ in self.bound):
            return
        attribute = self.get_metadata(ParentNodeProvider, node, None)
        is_record = (
            isinstance(attribute, cst.Attribute)
            and attribute.attr.value == "record"
            and attribute.value is node
        )
        self.uses.append((node.value, self._scopes(node), is_record))


@prescan("TPT002")
def timing_scopes(module: cst.Module, lines: list[int], target: str) -> dict:
    found = _Timing(set(lines))
    MetadataWrapper(module, unsafe_skip_copy=True).visit(found)
    unneeded: set[int] = set()
    declare: dict[int, tuple[str, list[str]]] = {}  # id(function) -> (keyword, names)
    for (name, scope_id), assign in found.bound.items():
        scope = found.scopes[scope_id]
        # the uses that see this binding: its own scope's, and nested functions' ones
        uses = [
            (scopes[0], record)
            for n, scopes, record in found.uses
            if n == name
            and next((s for s in scopes if (name, id(s)) in found.bound), None) is scope
        ][1:]  # the first is the assignment's own target
        if not uses:
            continue
        first_scope, first_is_record = uses[0]
        if first_is_record and all(where is first_scope for where, _ in uses):
            # every use is in one scope and the record() comes first: it binds the variable
            # there (a closure's own local), so the constructor line has nothing to do
            unneeded.add(id(assign))
            continue
        elsewhere = {id(where): where for where, record in uses if record and where is not scope}
        for where in elsewhere.values():  # the enclosing code reads what the closure records
            keyword = "nonlocal" if isinstance(scope, cst.FunctionDef) else "global"
            declare.setdefault(id(where), (keyword, []))[1].append(name)
    return {UNNEEDED: unneeded, DECLARE: declare}


@fixer("TPT002")
def cuda_event(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Call):
        raise NotApplicable("an event type reference, not a constructor call")
    holder: cst.CSTNode | None = ctx.original
    while holder is not None and not isinstance(holder, cst.Assign | cst.AnnAssign):
        if isinstance(holder, cst.BaseStatement):
            raise NotApplicable("event not assigned to a variable; rewrite its timing by hand")
        holder = ctx.parent(holder)
    if holder is None:
        raise NotApplicable("event not assigned to a variable")
    targets = holder.targets if isinstance(holder, cst.Assign) else [holder]
    names = ctx.state.setdefault(HOLDERS, set())
    for t in targets:
        names.update(_targets(t.target))
    if id(holder) in ctx.state.get(UNNEEDED, ()) and ctx.parent(ctx.original) is holder:
        return REMOVE_STATEMENT  # ``start = Event()``: its record() is what binds it
    return ctx.expr("time.perf_counter()")


def _elapsed(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "elapsed_time"
    )


def _milliseconds(node: cst.BaseExpression) -> TypeGuard[cst.BinaryOperation]:
    """``(b - a) * 1000.0``: what an ``elapsed_time`` became."""
    return isinstance(node, cst.BinaryOperation) and code_of(node.right) == "1000.0"


def _in_seconds(original: cst.BinaryOperation, node: cst.CSTNode) -> cst.BaseExpression | None:
    """``elapsed_time(b) / 1000``, ``elapsed_time(b) * 1e-3``, ``1e-3 * elapsed_time(b)``:
    seconds, which is what perf_counter measures already: the ``(b - a)`` of the port."""
    if not isinstance(node, cst.BinaryOperation):
        return None
    left, right = original.left, original.right
    if isinstance(original.operator, cst.Divide):
        kept = node.left if _elapsed(left) and code_of(right) in SECONDS else None
    elif isinstance(original.operator, cst.Multiply) and _elapsed(left):
        kept = node.left if code_of(right) in MILLI else None
    elif isinstance(original.operator, cst.Multiply) and _elapsed(right):
        kept = node.right if code_of(left) in MILLI else None
    else:
        kept = None
    return kept.left if kept is not None and _milliseconds(kept) else None


def _declared(node: cst.FunctionDef, keyword: str, names: list[str]) -> cst.FunctionDef:
    """``nonlocal start, end`` as the function's first statement (after its docstring)."""
    names_node = [cst.NameItem(cst.Name(n)) for n in dict.fromkeys(names)]
    small = cst.Nonlocal(names_node) if keyword == "nonlocal" else cst.Global(names_node)
    body = list(node.body.body)
    at = 1 if body and node.get_docstring() is not None else 0
    body.insert(at, cst.SimpleStatementLine([small]))
    return node.with_changes(body=node.body.with_changes(body=body))


def _recorded(line: cst.CSTNode, holders: set[str]) -> str | None:
    """The event a line ``e.record()`` records (as written), if that is all the line does."""
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
        return None
    stmt = line.body[0]
    found = _event_call(stmt.value, holders) if isinstance(stmt, cst.Expr) else None
    return code_of(_receiver(found[1])) if found and found[0] == "record" else None


def _syncs(line: cst.CSTNode, holders: set[str]) -> bool:
    """A line that only waits for the device: ``torch.cuda.synchronize()``, ``e.synchronize()``."""
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
        return False
    stmt = line.body[0]
    if not (isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call)):
        return False
    found = _event_call(stmt.value, holders)
    if found is not None:
        return found[0] in ("synchronize", "wait")
    name = dotted(stmt.value.func)
    return name is not None and name.endswith(SYNCS)


def _neighbours(
    line: cst.CSTNode, ctx: FixContext
) -> tuple[cst.CSTNode | None, cst.CSTNode | None]:
    """The statements just before and just after ``line`` in its block (original nodes)."""
    block = ctx.parent(line)
    body = list(getattr(block, "body", ()))
    at = next((i for i, s in enumerate(body) if s is line), None)
    if at is None:
        return None, None
    return (body[at - 1] if at else None), (body[at + 1] if at + 1 < len(body) else None)


def _event_call(node: cst.CSTNode, holders: set[str]) -> tuple[str, cst.Call] | None:
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and _base(node.func.value) in holders
    ):
        return node.func.attr.value, node
    return None


def _receiver(call: cst.Call) -> cst.BaseExpression:
    """The event an event method is called on (``_event_call`` found ``e.method(...)``)."""
    return cst.ensure_type(call.func, cst.Attribute).value


@follow_up("TPT002")
def event_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    declared = ctx.state.get(DECLARE, {}).get(id(original))
    if declared and isinstance(node, cst.FunctionDef):
        return _declared(node, *declared)
    if isinstance(original, cst.BinaryOperation):
        difference = _in_seconds(original, node)
        if difference is not None:
            bare = (cst.Assign, cst.AugAssign, cst.Return, cst.Arg)
            if isinstance(ctx.parent(original), bare):
                difference = difference.with_changes(lpar=[], rpar=[])
            return difference
    holders = ctx.state.get(HOLDERS)
    if not holders:
        return None
    if (
        isinstance(original, cst.SimpleStatementLine)
        and isinstance(node, cst.SimpleStatementLine)  # the line, its children rewritten
        and len(original.body) == 1
    ):
        if _recorded(original, holders) is not None:
            event = _recorded(original, holders)
            stamp = cst.parse_statement(f"{event} = time.perf_counter()\n")
            ctx.need("time")
            before, _ = _neighbours(original, ctx)
            if before is not None and _syncs(before, holders):
                return stamp.with_changes(leading_lines=node.leading_lines)  # one is enough
            sync = ctx.expr(sync_call(ctx.target))
            return cst.FlattenSentinel(
                [node.with_changes(body=[cst.Expr(sync)]), stamp.with_changes(leading_lines=())]
            )
        before, _ = _neighbours(original, ctx)
        if _syncs(original, holders) and before is not None and _recorded(before, holders):
            return REMOVE_STATEMENT  # the record() just above synchronized before its stamp
        return None
    found = _event_call(node, holders)
    if (
        found is None
        and isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "elapsed_time"
    ):  # s.elapsed_time(e) over zip(starts, ends): an event method, whatever the name
        found = ("elapsed_time", node)
    if found is None:
        return None
    method, call = found
    receiver = code_of(_receiver(call))
    if method == "elapsed_time" and len(call.args) == 1:
        other = code_of(call.args[0].value)
        return cst.parse_expression(f"({other} - {receiver}) * 1000.0")
    if method in ("synchronize", "wait"):
        return ctx.expr(sync_call(ctx.target))
    if method == "query":
        return cst.Name("True")
    return None
