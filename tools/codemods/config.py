"""Codemods for backend flags, compile/profiler settings, data loading, distributed
setup, serialization and fused optimizers (TPB, TPC, TPL, TPN, TPS, TPK014)."""

from __future__ import annotations

import libcst as cst

from .base import (
    ACCELERATOR_DEVICE,
    ACCELERATOR_TYPE,
    DIST_BACKEND,
    REMOVE_STATEMENT,
    FixContext,
    NotApplicable,
    arg_named,
    dotted,
    set_kwarg,
    string_value,
    with_string,
)
from .base import fixer as register

NON_ACCEL = frozenset({"tpu", "neuron", "xla"})
REMOVE_ARG = cst.RemoveFromParent()


def _assigned_flag(ctx: FixContext) -> bool:
    """Whether the finding is the target of an assignment (``flag = value``)."""
    return isinstance(ctx.original, cst.Attribute | cst.Name)


@register("TPB001", NON_ACCEL)
@register("TPB004")
def drop_flag_statement(node: cst.CSTNode, ctx: FixContext):
    """cuDNN / CUDA backend settings do nothing on the target: the statement goes."""
    if isinstance(node, cst.Call):
        raise NotApplicable("a cuDNN query used as a value; decide by hand")
    return REMOVE_STATEMENT


@register("TPB002", {"tpu", "neuron"})
def drop_tf32(node: cst.CSTNode, ctx: FixContext):
    return REMOVE_STATEMENT


@register("TPB002", {"xla", "accelerator"})
def tf32_precision(node: cst.CSTNode, ctx: FixContext):
    raise NotApplicable("rewrite the TF32 flag with the target's precision API by hand")


@register("TPB003", NON_ACCEL)
def drop_sdpa_selection(node: cst.CSTNode, ctx: FixContext):
    if isinstance(node, cst.Call) and dotted(node.func) and "enable_" in dotted(node.func):
        return REMOVE_STATEMENT
    raise NotApplicable("an attention-kernel selection in a with-block; unwrap it by hand")


@register("TPC001")
def compile_mode(node: cst.Call, ctx: FixContext):
    return _without(node, "mode")


@register("TPC002")
def compile_backend(node: cst.Call, ctx: FixContext):
    if ctx.target == "accelerator":
        return _without(node, "backend")
    backend = {"tpu": "tpu", "neuron": "neuron", "xla": "openxla"}[ctx.target]
    return set_kwarg(node, "backend", cst.SimpleString(f'"{backend}"'))


@register("TPC003", {"tpu", "neuron"})
def profiler_activity(node: cst.Attribute, ctx: FixContext):
    if not isinstance(node, cst.Attribute):
        raise NotApplicable("unexpected profiler activity form")
    return node.with_changes(attr=cst.Name("PrivateUse1"))


@register("TPC003", {"accelerator"})
def profiler_activity_accel(node: cst.CSTNode, ctx: FixContext):
    raise NotApplicable("use torch.profiler.supported_activities() for the activity list")


@register("TPC004")
def profiler_use_cuda(node: cst.Arg, ctx: FixContext):
    if not isinstance(node, cst.Arg):
        raise NotApplicable("unexpected profiler argument")
    value = (
        ctx.expr(ACCELERATOR_TYPE)
        if ctx.target == "accelerator"
        else cst.SimpleString(f'"{ctx.target}"')
    )
    return node.with_changes(keyword=cst.Name("use_device"), value=value)


@register("TPC005")
def profiler_sort_key(node: cst.SimpleString, ctx: FixContext):
    value = string_value(node)
    if value is None:
        raise NotApplicable("not a string literal")
    return with_string(node, value.replace("cuda", "device"))


@register("TPL001")
def pin_memory_flag(node: cst.Arg, ctx: FixContext):
    if ctx.target == "xla":
        return REMOVE_ARG
    if ctx.target == "accelerator":
        return node.with_changes(value=ctx.expr("torch.accelerator.is_available()"))
    return node.with_changes(value=cst.Name("False"))


@register("TPL002")
def pin_memory_call(node: cst.Call, ctx: FixContext):
    if not isinstance(node.func, cst.Attribute):
        raise NotApplicable("unexpected pin_memory form")
    return node.func.value


@register("TPL003", {"xla"})
def non_blocking(node: cst.Arg, ctx: FixContext):
    return REMOVE_ARG


@register("TPK014")
def fused_flag(node: cst.Arg, ctx: FixContext):
    return REMOVE_ARG


def _backend(ctx: FixContext) -> cst.BaseExpression:
    if ctx.target == "accelerator":
        return ctx.expr(f"torch.distributed.get_default_backend_for_device({ACCELERATOR_DEVICE})")
    return cst.SimpleString(f'"{DIST_BACKEND[ctx.target]}"')


@register("TPN001")
def init_process_group(node: cst.Call, ctx: FixContext):
    backend = arg_named(node, "backend", 0)
    if backend is None:
        raise NotApplicable("no backend argument")
    args = [a.with_changes(value=_backend(ctx)) if a is backend else a for a in node.args]
    call = node.with_changes(args=args)
    if ctx.target == "xla" and arg_named(call, "init_method") is None:
        call = set_kwarg(call, "init_method", cst.SimpleString('"xla://"'))
    return call


@register("TPN002")
def nccl_value(node: cst.SimpleString, ctx: FixContext):
    if string_value(node) != "nccl":
        raise NotApplicable("a composite backend string; edit by hand")
    if ctx.target == "accelerator":
        return _backend(ctx)
    return with_string(node, DIST_BACKEND[ctx.target])


@register("TPN006", NON_ACCEL)
def nccl_env(node: cst.SimpleString, ctx: FixContext):
    return REMOVE_STATEMENT


@register("TPN007")
def nccl_available(node: cst.CSTNode, ctx: FixContext):
    if not isinstance(node, cst.Call):
        raise NotApplicable("raw NCCL API; port by hand")
    if ctx.target == "accelerator":
        return ctx.expr(
            "torch.distributed.is_backend_available("
            f"torch.distributed.get_default_backend_for_device({ACCELERATOR_DEVICE}))"
        )
    return ctx.expr(f'torch.distributed.is_backend_available("{DIST_BACKEND[ctx.target]}")')


@register("TPN003")
def reduce_avg(node: cst.CSTNode, ctx: FixContext):
    raise NotApplicable("ReduceOp.AVG -> SUM needs a division by the world size; edit by hand")


@register("TPS001")
def map_location_cuda(node: cst.Call, ctx: FixContext):
    arg = arg_named(node, "map_location", 1)
    if arg is None:
        raise NotApplicable("no map_location argument")
    args = [a.with_changes(value=cst.SimpleString('"cpu"')) if a is arg else a for a in node.args]
    return node.with_changes(args=args)


@register("TPS002")
def map_location_missing(node: cst.Call, ctx: FixContext):
    return set_kwarg(node, "map_location", cst.SimpleString('"cpu"'))


def _without(call: cst.Call, keyword: str) -> cst.Call:
    args = [a for a in call.args if not (a.keyword and a.keyword.value == keyword)]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)
