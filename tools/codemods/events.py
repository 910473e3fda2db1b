"""CUDA-event timing becomes ``synchronize()`` + ``time.perf_counter()`` (TPT002).

TorchTPU's events are placeholders, so timing must not rely on them. The event
constructor becomes a timestamp; the fixer notes which variables held events,
and a follow-up rewrites their uses: ``e.record()`` becomes a synchronize then a
timestamp, ``a.elapsed_time(b)`` becomes ``(b - a) * 1000.0`` (milliseconds, as
CUDA reported), ``e.synchronize()``/``e.wait()`` a synchronize, ``e.query()`` True.
"""

from __future__ import annotations

import libcst as cst

from .base import FixContext, NotApplicable, code_of, follow_up, sync_call
from .base import fixer as register

HOLDERS = "event_holders"


def _base(node: cst.BaseExpression) -> str:
    """``starts[i]`` -> ``starts``; ``self.start`` -> ``self.start``."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return code_of(node)


def _targets(node: cst.CSTNode) -> list[str]:
    if isinstance(node, cst.Tuple | cst.List):
        return [t for e in node.elements for t in _targets(e.value)]
    return [code_of(node)]


@register("TPT002")
def cuda_event(node: cst.CSTNode, ctx: FixContext):
    if not isinstance(node, cst.Call):
        raise NotApplicable("an event type reference, not a constructor call")
    holder = ctx.original
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
    return ctx.expr("time.perf_counter()")


def _event_call(node: cst.CSTNode, holders: set[str]) -> tuple[str, cst.Call] | None:
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and _base(node.func.value) in holders
    ):
        return node.func.attr.value, node
    return None


@follow_up("TPT002")
def event_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext):
    holders = ctx.state.get(HOLDERS)
    if not holders:
        return None
    if isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1:
        stmt = node.body[0]
        found = _event_call(stmt.value, holders) if isinstance(stmt, cst.Expr) else None
        if found and found[0] == "record":
            event = code_of(found[1].func.value)
            sync = ctx.expr(sync_call(ctx.target))
            stamp = cst.parse_statement(f"{event} = time.perf_counter()\n")
            ctx.need("time")
            return cst.FlattenSentinel(
                [node.with_changes(body=[cst.Expr(sync)]), stamp.with_changes(leading_lines=())]
            )
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
    receiver = code_of(call.func.value)
    if method == "elapsed_time" and len(call.args) == 1:
        other = code_of(call.args[0].value)
        return cst.parse_expression(f"({other} - {receiver}) * 1000.0")
    if method in ("synchronize", "wait"):
        return ctx.expr(sync_call(ctx.target))
    if method == "query":
        return cst.Name("True")
    return None
