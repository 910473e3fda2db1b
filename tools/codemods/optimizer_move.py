"""Codemod for an optimizer built before its model moves to the device (TPD022).

On CUDA, ``model.to("cuda")`` swaps each parameter's data in place: the CPU and CUDA
tensor types are "compatible shallow-copy types", so the Parameter objects an optimizer
took earlier are the ones that now live on the GPU. A PrivateUse1 device (TorchTPU,
TorchNeuron) or XLA is not one of them (c10 ``TensorImpl::has_compatible_shallow_copy_type``
lists CPU, CUDA, MPS, HIP, XPU, HPU, MTIA), so ``Module._apply`` puts new Parameters in
the module and the optimizer keeps stepping the orphaned CPU copies: the loss never
moves, with no error (pytorch/xla#1623). ``model.to(device)`` is in place for a module
and idempotent, so taking ``model.to(device).parameters()`` where the optimizer is built
gives it the parameters the model will train with, and the later move changes nothing.
"""

from __future__ import annotations

import libcst as cst

from .base import FixContext, Fixed, NotApplicable, arg_named, code_of, fixer, string_value

_SCOPES = (cst.FunctionDef, cst.Module)


def _scope(node: cst.CSTNode, ctx: FixContext) -> cst.CSTNode:
    scope = next((n for n in (node, *ctx.ancestors(node)) if isinstance(n, _SCOPES)), None)
    if scope is None:
        raise NotApplicable("no enclosing function or module")
    return scope


def _device_of(move: cst.Call, ctx: FixContext) -> str | None:
    """The device a move names, as the port spells it; None for a dtype-only ``.to``."""
    import libcst.matchers as m  # here: importing libcst.matchers costs every run a second

    if m.matches(move.func, m.Attribute(attr=m.Name("cuda"))):
        return code_of(ctx.device_expr())
    arg = arg_named(move, "device", 0)
    if arg is None:
        return None
    if string_value(arg.value) is not None or code_of(arg.value) == ctx.device_name:
        return code_of(ctx.device_expr())  # a CUDA string becomes the target's device
    if m.matches(arg.value, m.Attribute(value=m.Name("torch"))):
        return None  # .to(torch.float16): a dtype
    raise NotApplicable(
        f"the model moves to {code_of(arg.value)}: build the optimizer after that move"
    )


@fixer("TPD022")
def optimizer_before_device_move(node: cst.Call, ctx: FixContext) -> Fixed:
    """``Adam(model.parameters())`` -> ``Adam(model.to(device).parameters())``."""
    import libcst.matchers as m

    func = node.func
    if not (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.attr.value == "parameters"
    ):
        raise NotApplicable("not name.parameters()")
    name = func.value.value
    moves = m.findall(
        _scope(ctx.original, ctx),
        m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("to") | m.Name("cuda"))),
    )
    calls = (move for move in moves if isinstance(move, cst.Call))  # what the matcher finds
    devices = {d for d in (_device_of(call, ctx) for call in calls) if d is not None}
    if len(devices) != 1:
        raise NotApplicable(f"{name} moves to {len(devices)} devices; order by hand")
    moved = ctx.expr(f"{name}.to({devices.pop()})")
    return node.with_changes(func=func.with_changes(value=moved))
