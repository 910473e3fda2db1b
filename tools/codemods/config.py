"""Codemods for backend flags, compile/profiler settings, data loading, distributed
setup, serialization and fused optimizers (TPB, TPC, TPL, TPN, TPS, TPK014)."""

from __future__ import annotations

import re

import libcst as cst

from .base import (
    ALL_KINDS,
    REMOVE_STATEMENT,
    VENDOR,
    FixContext,
    Fixed,
    NotApplicable,
    arg_named,
    code_of,
    dotted,
    fixer,
    follow_up,
    set_kwarg,
    string_value,
    with_arg_value,
    with_string,
)
from .sdpa_backends import note_list

REMOVE_ARG = cst.RemoveFromParent()


def _assigned_flag(ctx: FixContext) -> bool:
    """Whether the finding is the target of an assignment (``flag = value``)."""
    return isinstance(ctx.original, cst.Attribute | cst.Name)


# What a CUDA backend query answers on a machine without CUDA.
NO_CUDA_ANSWERS = {"version": "None", "is_available": "False", "is_built": "False"}


def _statement_or_constant(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """A setting (``flag = x``, ``configure(...)``) goes; a query becomes the no-CUDA answer."""
    parent = ctx.parent(ctx.original)
    if isinstance(parent, cst.AssignTarget | cst.Expr | cst.AugAssign):
        return REMOVE_STATEMENT
    if isinstance(parent, cst.Assign | cst.AnnAssign) and getattr(parent, "target", None) is (
        ctx.original
    ):
        return REMOVE_STATEMENT
    name = (dotted(node.func) if isinstance(node, cst.Call) else dotted(node)) or ""
    return cst.parse_expression(NO_CUDA_ANSWERS.get(name.rsplit(".", 1)[-1], "False"))


# tpu: cudnn.allow_tf32 = False keeps its meaning (matmul_precision.py)
@fixer("TPB001", VENDOR)  # tpu: matmul_precision.py
@fixer("TPB004")
def drop_flag_statement(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """cuDNN / CUDA backend settings do nothing on the target."""
    return _statement_or_constant(node, ctx)


@fixer("TPB002", VENDOR)  # tpu: matmul_precision.py; xla below
def drop_tf32(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    return _statement_or_constant(node, ctx)


@fixer("TPB002", {"xla", "accelerator"})
def tf32_precision(node: cst.CSTNode, ctx: FixContext, setter: str | None = None) -> Fixed:
    """``allow_tf32 = x`` -> ``set_..._precision("high" if x else "highest")``; the reduced
    half-precision reduction flags have no counterpart and go."""
    setter = setter or ctx.profile.matmul_precision_setter
    if setter is None:
        raise NotApplicable("the target has no float32 matmul precision setting")
    name = dotted(node) or ""
    assign = ctx.parent(ctx.parent(ctx.original))
    if not name.endswith("allow_tf32"):
        return _statement_or_constant(node, ctx)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        raise NotApplicable("TF32 flag read, not set; decide by hand")
    value = code_of(assign.value)
    choice = {"True": '"high"', "False": '"highest"'}.get(
        value, f'"high" if {value} else "highest"'
    )
    ctx.state.setdefault(REPLACE_STATEMENTS, {})[id(assign)] = f"{setter}({choice})"
    ctx.need(setter.rpartition(".")[0])
    return node


REPLACE_STATEMENTS = "replace_statements"


@follow_up("TPB002")
def replace_statement(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """Small statements a fixer asked to replace whole (``flag = x`` -> ``setter(...)``)."""
    pending = ctx.state.get(REPLACE_STATEMENTS)
    if not pending or not isinstance(original, cst.SimpleStatementLine):
        return None
    if not isinstance(node, cst.SimpleStatementLine):  # the line, its children rewritten
        return None
    body = list(node.body)
    changed = False
    for i, small in enumerate(original.body):
        if id(small) in pending:
            body[i] = cst.Expr(cst.parse_expression(pending.pop(id(small))))
            changed = True
    return node.with_changes(body=body) if changed else None


# tpu keeps the choice where TorchTPU honours it (sdpa_backends.py).
@fixer("TPB003", VENDOR)
@fixer("TPB005", VENDOR, but={"tpu"})
def sdpa_selection(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """Kernel choices the target lacks: backends become MATH (the one torch's SDPA allows
    on a device it has no fused kernel for), the legacy ``sdp_kernel(...)`` context a no-op,
    ``enable_*_sdp(...)`` calls go."""
    name = (dotted(node.func) if isinstance(node, cst.Call) else dotted(node)) or ""
    last = name.rsplit(".", 1)[-1]
    if isinstance(node, cst.Attribute) and last.endswith("_ATTENTION"):
        note_list(ctx)  # [FLASH, EFFICIENT] -> [MATH, MATH] -> [MATH]
        return node.with_changes(attr=cst.Name("MATH"))
    if last == "sdp_kernel":
        ctx.need("contextlib")
        return cst.parse_expression("contextlib.nullcontext()")
    if last.startswith("enable_"):
        return REMOVE_STATEMENT
    if last.endswith("_enabled"):
        return cst.Name("False")
    raise NotApplicable(f"no codemod for {name}")


@fixer("TPC001")
def compile_mode(node: cst.Call, ctx: FixContext) -> Fixed:
    return _without(node, "mode")


@fixer("TPC002")
def compile_backend(node: cst.Call, ctx: FixContext) -> Fixed:
    backend = ctx.profile.compile_backend
    if backend is None:  # torch.compile picks the device's own
        return _without(node, "backend")
    return set_kwarg(node, "backend", cst.SimpleString(f'"{backend}"'))


@fixer("TPC003", VENDOR, but={"xla"})
def profiler_activity(node: cst.Attribute, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Attribute):
        raise NotApplicable("unexpected profiler activity form")
    return node.with_changes(attr=cst.Name("PrivateUse1"))


# TPC004 on xla: torch's legacy profiler accepts only cuda/xpu/mtia/hpu or the PrivateUse1
# backend as use_device (XLA is none of them): "xla" would be warned about and dropped.
@fixer("TPC004", ALL_KINDS, but={"xla"})
def profiler_use_cuda(node: cst.Arg, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Arg):
        raise NotApplicable("unexpected profiler argument")
    device = ctx.profile.device_type_expr
    flag = node.value
    if (
        node.keyword
        and node.keyword.value == "use_cuda"
        and not (isinstance(flag, cst.Name) and flag.value == "True")
    ):  # use_cuda=use_gpu keeps its condition
        device = f"{device} if {code_of(flag)} else None"
    return node.with_changes(keyword=cst.Name("use_device"), value=ctx.expr(device))


@fixer("TPC005")
def profiler_sort_key(node: cst.SimpleString, ctx: FixContext) -> Fixed:
    value = string_value(node)
    if value is None:
        raise NotApplicable("not a string literal")
    arg = ctx.parent(ctx.original)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if isinstance(call, cst.Call) and (dotted(call.func) or "").endswith("export_stacks"):
        # export_stacks only knows self_{cpu,cuda,xpu,privateuse1}_time_total
        if not ctx.profile.privateuse1:
            raise NotApplicable("export_stacks has no metric for this target's device")
        return with_string(node, value.replace("cuda", "privateuse1"))
    return with_string(node, value.replace("cuda", "device"))


# Not on tpu: TorchTPU implements pinned host memory, so the program's pinning stays.
@fixer("TPL001", ALL_KINDS, but={"tpu"})
def pin_memory_flag(node: cst.Arg, ctx: FixContext) -> Fixed:
    if ctx.profile.may_lack_device:
        return node.with_changes(value=ctx.expr("torch.accelerator.is_available()"))
    return REMOVE_ARG  # False is the default: a reviewer would ask to drop it, not flip it


UNPINNED = "pin_memory_removed"


@fixer("TPL002", ALL_KINDS, but={"tpu"})
def pin_memory_call(node: cst.Call, ctx: FixContext) -> Fixed:
    if not isinstance(node.func, cst.Attribute):
        raise NotApplicable("unexpected pin_memory form")
    ctx.state[UNPINNED] = True
    return node.func.value  # pinning is an optimisation; the data is the same without it


def _elements(node: cst.BaseExpression) -> list[str]:
    if isinstance(node, cst.Tuple | cst.List):
        return [code_of(e.value) for e in node.elements]
    return [code_of(node)]


@follow_up("TPL002")
def self_assignment(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """``xs, ys = xs.pin_memory(), ys.pin_memory()`` without the pinning assigns each name
    to itself: the statement had no other job, so it goes."""
    if not ctx.state.get(UNPINNED) or not isinstance(node, cst.SimpleStatementLine):
        return None
    if len(node.body) != 1 or not isinstance(assign := node.body[0], cst.Assign):
        return None
    same = len(assign.targets) == 1 and (
        _elements(assign.targets[0].target) == _elements(assign.value)
    )
    return REMOVE_STATEMENT if same and node is not original else None


@fixer("TPL003", {"xla"})
def non_blocking(node: cst.Arg, ctx: FixContext) -> Fixed:
    return REMOVE_ARG


@fixer("TPK014")
def fused_flag(node: cst.Arg, ctx: FixContext) -> Fixed:
    return REMOVE_ARG


def _backend(ctx: FixContext) -> cst.BaseExpression:
    backend = ctx.profile.dist_backend
    if backend is None:  # the backend of whatever device the program finds
        return ctx.expr(
            f"torch.distributed.get_default_backend_for_device({ctx.profile.device_expr})"
        )
    return cst.SimpleString(f'"{backend}"')


@fixer("TPN001")
def init_process_group(node: cst.Call, ctx: FixContext) -> Fixed:
    call = with_arg_value(node, "backend", 0, _backend(ctx))
    if (dotted(node.func) or "").endswith("new_group"):
        return call  # a subgroup inherits the init method
    init = ctx.profile.dist_init_method
    if ctx.profile.dist_import:  # registers the backend (torch_xla's "xla")
        ctx.need(ctx.profile.dist_import)
    if init and (ctx.profile.dist_init_required or arg_named(call, "init_method") is None):
        return set_kwarg(call, "init_method", cst.SimpleString(f'"{init}"'))
    return call


@fixer("TPN002")
def nccl_value(node: cst.SimpleString, ctx: FixContext) -> Fixed:
    if string_value(node) != "nccl":
        raise NotApplicable("a composite backend string; edit by hand")
    if ctx.profile.dist_backend is None:
        return _backend(ctx)
    return with_string(node, ctx.profile.dist_backend)


DROP_DICT_ELEMENTS = "drop_dict_elements"


@fixer("TPN006", VENDOR)
def nccl_env(node: cst.SimpleString, ctx: FixContext) -> Fixed:
    """The NCCL setting goes: its statement (``os.environ["NCCL_X"] = ...``,
    ``os.environ.setdefault(...)``) or its entry in a dict of variables; a read stays."""
    parent = ctx.parent(ctx.original)
    if isinstance(parent, cst.DictElement) and parent.key is ctx.original:
        ctx.state.setdefault(DROP_DICT_ELEMENTS, set()).add(id(parent))
        return node
    if isinstance(parent, cst.Index):  # os.environ["NCCL_X"]: Subscript > SubscriptElement > Index
        parent = ctx.parent(parent)
    holder = ctx.parent(parent) if isinstance(parent, cst.SubscriptElement | cst.Arg) else None
    statement = ctx.parent(holder) if holder is not None else None
    if isinstance(holder, cst.Subscript) and isinstance(statement, cst.AssignTarget):
        return REMOVE_STATEMENT
    if isinstance(holder, cst.Call) and isinstance(statement, cst.Expr):
        return REMOVE_STATEMENT
    raise NotApplicable("an NCCL variable read or passed on; remove it by hand if unused")


@follow_up("TPN006")
def drop_dict_elements(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    doomed = ctx.state.get(DROP_DICT_ELEMENTS)
    if not doomed or not isinstance(original, cst.Dict) or not isinstance(node, cst.Dict):
        return None
    keep = [
        new
        for old, new in zip(original.elements, node.elements, strict=True)
        if id(old) not in doomed
    ]
    if len(keep) == len(node.elements):
        return None
    if keep and len(keep) < len(node.elements):
        keep[-1] = keep[-1].with_changes(comma=original.elements[-1].comma)
    return node.with_changes(elements=keep)


@fixer("TPN007")
def nccl_available(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Call):
        raise NotApplicable("raw NCCL API; port by hand")
    return ctx.expr(f"torch.distributed.is_backend_available({code_of(_backend(ctx))})")


AVG_DIVIDES = "avg_divides"


@fixer("TPN003")
def reduce_avg(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``all_reduce(t, op=ReduceOp.AVG)`` -> ``op=ReduceOp.SUM`` then ``t /= world_size``."""
    if not isinstance(node, cst.Attribute) or node.attr.value != "AVG":
        raise NotApplicable("only ReduceOp.AVG in all_reduce is rewritten")
    arg = ctx.parent(ctx.original)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    callee = (dotted(call.func) if isinstance(call, cst.Call) else None) or ""
    if not isinstance(call, cst.Call) or not callee.endswith("all_reduce") or not call.args:
        raise NotApplicable("ReduceOp.AVG outside all_reduce; divide by the world size by hand")
    if arg_named(call, "async_op") is not None:
        raise NotApplicable("asynchronous all_reduce: divide after wait() by hand")
    statement = ctx.parent(call)
    if not isinstance(statement, cst.Expr):
        raise NotApplicable("all_reduce result is used; divide by hand")
    prefix = callee.rsplit(".", 1)[0] if "." in callee else "torch.distributed"
    code = code_of
    tensor = code(call.args[0].value)
    group = arg_named(call, "group", 2)
    size = f"{prefix}.get_world_size({code(group.value) if group else ''})"
    ctx.state.setdefault(AVG_DIVIDES, {})[id(statement)] = f"{tensor} /= {size}"
    return node.with_changes(attr=cst.Name("SUM"))


@follow_up("TPN003")
def divide_after_sum(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    divides = ctx.state.get(AVG_DIVIDES)
    if not divides or not isinstance(original, cst.SimpleStatementLine):
        return None
    code = next((divides.pop(id(s)) for s in original.body if id(s) in divides), None)
    if code is None:
        return None
    return cst.FlattenSentinel([node, cst.parse_statement(code + "\n")])


@fixer("TPS001")
def map_location_cuda(node: cst.Call, ctx: FixContext) -> Fixed:
    # Onto the device for tpu/neuron: tensors the program uses straight from the
    # checkpoint (not only through load_state_dict) must land where the model is.
    # xla loads on the CPU first (torch_xla's advice); accelerator code may be on a CPU.
    if ctx.profile.checkpoint_onto_device:
        return with_arg_value(node, "map_location", 1, ctx.device_expr())
    return with_arg_value(node, "map_location", 1, cst.SimpleString('"cpu"'))


@fixer("TPS002")
def map_location_missing(node: cst.Call, ctx: FixContext) -> Fixed:
    return set_kwarg(node, "map_location", cst.SimpleString('"cpu"'))


def _without(call: cst.Call, keyword: str) -> cst.Call:
    args = [a for a in call.args if not (a.keyword and a.keyword.value == keyword)]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


# Not on xla: torch.accelerator does not count XLA devices, and torch_xla launches with
# torch_xla.launch(fn), not torchrun (TPN008 stays manual there).
@fixer("TPN008", {"tpu", "neuron", "accelerator"})
def nproc_gpu(node: cst.SimpleString, ctx: FixContext) -> Fixed:
    """``"--nproc_per_node=gpu"`` in a launch command built in Python: the device count."""
    value = string_value(node)
    if value is None or "gpu" not in value:
        raise NotApplicable("not a literal nproc_per_node=gpu")
    if ctx.profile.may_lack_device:  # torchrun's own count: the accelerator's, else the CPUs'
        return with_string(node, re.sub(r"(nproc[_-]per[_-]node[= ])gpu", r"\1auto", value))
    text = value.replace("{", "{{").replace("}", "}}")
    text = re.sub(r"(nproc[_-]per[_-]node[= ])gpu", r"\1{torch.accelerator.device_count()}", text)
    quote = node.quote
    return ctx.expr(f"f{quote}{text}{quote}")
