"""A GradScaler that only scales goes away with its calls on bf16 targets (TPA006).

Loss scaling keeps fp16 gradients from underflowing; TorchTPU, TorchNeuron and XLA train in
bf16, which needs none. A disabled scaler would run (its calls pass through), but a reviewer
reads four lines that do nothing: ``scaler.scale(loss).backward()`` is ``loss.backward()``,
``scaler.step(opt)`` is ``opt.step()``, ``update()`` and ``unscale_()`` are nothing. The
scanner matches only a scaler whose every use in the file is one of those. The accelerator
target keeps a real scaler for its device (fp16 on CUDA still needs it).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..targets import profile
from .amp import grad_scaler
from .base import (
    REMOVE_STATEMENT,
    FixContext,
    Fixed,
    NotApplicable,
    code_of,
    fixer,
    follow_up,
    prescan,
)

SCALERS = "grad_scalers"  # the names that held a scaler this run removes


class _Scalers(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: set[int]) -> None:
        self.lines: set[int] = lines
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target
        line = self.get_metadata(PositionProvider, node).start.line
        if line in self.lines and isinstance(target, cst.Name):
            self.found.add(target.value)


@prescan("TPA006")
def scalers(module: cst.Module, lines: list[int], target: str) -> dict:
    """The scalers to remove are known before the rewrite: a training function defined
    above the line that builds the scaler uses it first."""
    if profile(target).autocast_dtype != "bfloat16":
        return {}
    found = _Scalers(set(lines))
    MetadataWrapper(module, unsafe_skip_copy=True).visit(found)
    return {SCALERS: found.found} if found.found else {}


@fixer("TPA006")
def only_scaling(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Assign) or not isinstance(node.value, cst.Call):
        raise NotApplicable("not a scaler assignment")
    if ctx.profile.autocast_dtype != "bfloat16":  # a real scaler for the device
        return node.with_changes(value=grad_scaler(node.value, ctx))
    return REMOVE_STATEMENT


def _scaler_call(node: cst.CSTNode, names: set[str]) -> tuple[str, cst.Call] | None:
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Name)
        and node.func.value.value in names
    ):
        return node.func.attr.value, node
    return None


@follow_up("TPA006")
def scaler_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    names = ctx.state.get(SCALERS)
    if not names:
        return None
    if isinstance(original, cst.SimpleStatementLine) and len(original.body) == 1:
        statement = original.body[0]
        found = _scaler_call(statement.value, names) if isinstance(statement, cst.Expr) else None
        if found and found[0] in ("update", "unscale_"):
            return REMOVE_STATEMENT
        return None
    found = _scaler_call(original, names)
    if found is None or not isinstance(node, cst.Call) or not node.args:
        return None
    method = found[0]
    if method == "scale":  # scaler.scale(loss) -> loss (its .backward() stays)
        loss = node.args[0].value
        if isinstance(loss, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
            return loss
        return loss.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    if method == "step":  # scaler.step(opt) -> opt.step()
        optimizer = node.args[0].value
        return cst.parse_expression(f"{code_of(optimizer)}.step()")
    return None
