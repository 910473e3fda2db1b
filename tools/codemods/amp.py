"""Codemods for mixed precision (TPA rules)."""

from __future__ import annotations

import libcst as cst

from ..pycustom import BF16_MODE
from . import repeats
from .base import (
    VENDOR,
    FixContext,
    Fixed,
    NotApplicable,
    arg_named,
    as_expression,
    code_of,
    drop_args,
    fixer,
    prepend_arg,
    set_kwarg,
    with_arg_value,
)


def _device_type(ctx: FixContext) -> cst.BaseExpression:
    return ctx.device_type_expr()


def _autocast_dtype(ctx: FixContext) -> cst.BaseExpression | None:
    """The dtype the target's autocast runs in (bfloat16: no loss scaling), or None where
    the program's own choice stays (device-agnostic code)."""
    dtype = ctx.profile.autocast_dtype
    return ctx.expr(f"torch.{dtype}") if dtype else None


# ``torch.cuda.amp.autocast``'s parameters, in order: a positional one becomes its keyword
# (``autocast(fp16_scaler is not None)`` keeps what switches it on).
CUDA_AUTOCAST_PARAMETERS = ("enabled", "dtype", "cache_enabled")


def _switched_off(call: cst.Call) -> bool:
    """``autocast(..., enabled=False)``: a region kept in full precision, which a dtype would
    only clutter."""
    enabled = arg_named(call, "enabled", None)
    return (
        enabled is not None
        and isinstance(enabled.value, cst.Name)
        and enabled.value.value == "False"
    )


def _autocast_call(node: cst.Call, ctx: FixContext) -> cst.Call:
    """``torch.autocast(<target>, dtype=...)`` keeping enabled=/cache_enabled=, given by
    keyword or by position."""
    positional = [a for a in node.args if a.keyword is None]
    if any(a.star for a in positional) or len(positional) > len(CUDA_AUTOCAST_PARAMETERS):
        raise NotApplicable("autocast's arguments are not all nameable")
    named = [
        a.with_changes(
            keyword=cst.Name(name),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        for a, name in zip(positional, CUDA_AUTOCAST_PARAMETERS, strict=False)
    ]
    keywords = [a for a in node.args if a.keyword is not None and a.keyword.value != "device_type"]
    args = [*named, *keywords]
    call = prepend_arg(
        node.with_changes(func=ctx.expr("torch.autocast"), args=args), _device_type(ctx)
    )
    dtype = _autocast_dtype(ctx)
    if dtype is not None and not _switched_off(call):
        call = set_kwarg(call, "dtype", dtype)
    elif not (arg_named(call, "dtype") or _switched_off(call) or any(a.star for a in call.args)):
        # torch.cuda.amp.autocast means float16; torch.autocast's default is per device
        # (bfloat16 on the CPU), so a device-agnostic port states the original's precision
        call = set_kwarg(call, "dtype", ctx.expr("torch.float16"))
    return call


@fixer("TPA001")
def cuda_amp_autocast(node: cst.Call, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Call):
        raise NotApplicable("autocast referenced without a call")
    return _autocast_call(node, ctx)


@fixer("TPA003")
def autocast_cuda(node: cst.Call, ctx: FixContext) -> Fixed:
    """Swap the "cuda" device argument; for bf16 targets make the dtype bfloat16."""
    call = with_arg_value(node, "device_type", 0, _device_type(ctx))
    callee = code_of(node.func)
    dtype = _autocast_dtype(ctx)
    if not callee.endswith("autocast") or _switched_off(call):
        return call
    if dtype is not None:
        return set_kwarg(call, "dtype", dtype)
    if arg_named(call, "dtype", 1) is None and not any(a.star for a in call.args):
        # autocast("cuda") runs in float16; on another device its default differs (bfloat16
        # on the CPU): a device-agnostic port states the original's precision, as TPA001's
        call = set_kwarg(call, "dtype", ctx.expr("torch.float16"))
    return call


@fixer("TPA002")
def grad_scaler(node: cst.Call, ctx: FixContext) -> Fixed:
    """bf16 targets: a disabled scaler (scale/step/update stay valid); else the device's own."""
    call = node.with_changes(func=ctx.expr("torch.amp.GradScaler"))
    if arg_named(call, "device", 0) is not None:  # keep its place and the call's layout
        call = with_arg_value(call, "device", 0, _device_type(ctx))
    else:
        keywords = [a for a in call.args if a.keyword is not None]
        call = prepend_arg(call.with_changes(args=keywords), _device_type(ctx))
    if ctx.profile.autocast_dtype == "bfloat16":
        call = set_kwarg(call, "enabled", cst.Name("False"))
    return call


note_dtypes = repeats.marker("TPA004")


@fixer("TPA004", VENDOR)
def float16(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.with_changes(func=node.func.with_changes(attr=cst.Name("bfloat16")))
    if isinstance(node, cst.Attribute | cst.Name):
        note_dtypes(ctx)  # (torch.float16, torch.bfloat16) -> (torch.bfloat16,)
        return ctx.expr("torch.bfloat16")
    raise NotApplicable("unexpected float16 form")


@fixer("TPA005")
def custom_fwd(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    call = node if isinstance(node, cst.Call) else cst.Call(func=as_expression(node))
    name = code_of(call.func).rsplit(".", 1)[-1]
    call = call.with_changes(func=ctx.expr(f"torch.amp.{name}"))
    return set_kwarg(drop_args(call, "device_type"), "device_type", _device_type(ctx))


# accelerate's mode for the target's autocast, where the program's is fp16: a helper the file
# defines once, so that a value known only at run time is read once and kept otherwise.
BF16_MODE_CODE = f'''def {BF16_MODE}(mixed_precision):
    """torchport (TPA007): the target's autocast is bf16; accelerate refuses fp16 there."""
    return "bf16" if str(mixed_precision) == "fp16" else mixed_precision
'''


@fixer("TPA007", VENDOR)
def accelerate_fp16(node: cst.Call, ctx: FixContext) -> Fixed:
    """``Accelerator(mixed_precision="fp16")`` -> ``"bf16"``, and a value known only at run
    time (``"fp16" if amp else "no"``) -> ``_bf16_for_fp16(...)``: accelerate refuses fp16
    on the target ("fp16 mixed precision is not supported on 'tpu'"; TorchTPU has no
    GradScaler kernels), and the target's autocast is bf16, as TPA001 ports autocast."""
    arg = arg_named(node, "mixed_precision")
    if arg is None:
        raise NotApplicable("no mixed_precision= keyword")
    if isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "fp16":
        return set_kwarg(node, "mixed_precision", arg.value.with_changes(value='"bf16"'))
    ctx.define(BF16_MODE, BF16_MODE_CODE)
    wrapped = cst.Call(func=cst.Name(BF16_MODE), args=[cst.Arg(value=arg.value)])
    return set_kwarg(node, "mixed_precision", wrapped)
