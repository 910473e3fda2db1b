"""Codemods for device placement (TPD rules).

TorchTPU shows each process one device, its own core, as ``tpu:0``: any other index is refused
and ``torch.tpu.set_device`` cannot switch (sandbox/data/torch_tpu.toml). On tpu a
rank-indexed device (``torch.device("cuda", local_rank)``, ``f"cuda:{local_rank}"``,
``.cuda(local_rank)``) therefore becomes the process's device, ``"tpu"``, and selecting a
device (``set_device``, ``with torch.cuda.device(i)``) goes: the process already runs on the
only device it has.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Sequence
from typing import Any

import libcst as cst
from torchport.sandbox import astparse

from . import cuda_arm
from .base import (
    ALL_KINDS,
    FIXERS,
    REMOVE_STATEMENT,
    VENDOR,
    FixContext,
    Fixed,
    Fixer,
    NotApplicable,
    Statement,
    arg_named,
    as_expression,
    block_lines,
    body_of,
    code_of,
    dotted,
    fixer,
    follow_up,
    guarded,
    prepend_arg,
    set_kwarg,
    string_value,
    with_string,
)

CUDA_STRING = re.compile(r"^cuda(:\d+)?$")


def _target_string(ctx: FixContext, index: str | None = None) -> str:
    name = ctx.vendor_device()
    return f"{name}:{index}" if index else name


@fixer("TPD001")
def cuda_method(node: cst.Call, ctx: FixContext) -> Fixed:
    """``x.cuda(...)`` -> ``x.to(<device>, ...)``; an index is kept where the target has one."""
    func = node.func
    if not isinstance(func, cst.Attribute):
        raise NotApplicable("not a method call")
    index = arg_named(node, "device", 0)
    device: cst.BaseExpression
    if index is not None and isinstance(index.value, cst.Call):
        device = index.value  # already a device (TPD005 rewrote the integer id)
    elif index is not None and ctx.device_name is None and _indexed(ctx):
        device = ctx.expr(f'torch.device("{ctx.profile.device}", {code_of(index.value)})')
    else:
        device = ctx.device_expr()
    if index is not None:
        args = [
            a.with_changes(value=device, keyword=None, equal=cst.MaybeSentinel.DEFAULT)
            if a is index
            else a
            for a in node.args
        ]
        call = node.with_changes(args=args)
    else:
        call = prepend_arg(node, device)
    return call.with_changes(func=func.with_changes(attr=cst.Name("to")))


def _plain_fstring(node: cst.CSTNode) -> cst.SimpleString | None:
    """``f"cuda"``, an f-string without a replacement field, as the plain string it is."""
    if not isinstance(node, cst.FormattedString):
        return None
    texts = [part.value for part in node.parts if isinstance(part, cst.FormattedStringText)]
    if len(texts) != len(node.parts):
        return None
    text = "".join(texts)
    return cst.SimpleString(f"{node.end}{text}{node.end}")


@fixer("TPD002")
def device_string(node: cst.SimpleString, ctx: FixContext) -> Fixed:
    node = _plain_fstring(node) or node
    value = string_value(node) or ""
    m = CUDA_STRING.match(value)
    if not m:
        raise NotApplicable(f"not a CUDA device string: {value!r}")
    index = m.group(1)[1:] if m.group(1) else None
    if not ctx.profile.is_vendor:
        if isinstance(ctx.parent(ctx.original), cst.MatchValue):
            raise NotApplicable(
                'a case pattern (`case "cuda":`) cannot hold the run-time accelerator type: '
                "match on `torch.accelerator.current_accelerator().type` by hand"
            )
        if index:
            kind = ctx.profile.device_type_expr.replace(chr(34), chr(39))
            return ctx.expr(f'f"{{{kind}}}:{index}"')
        return ctx.device_type_expr()
    if ctx.profile.device_import:  # importing torch_xla registers the "xla" device type
        ctx.need(ctx.profile.device_import)
    if ctx.profile.device_index_dropped:
        _drop_index_of_device_call(ctx)
    if ctx.profile.one_device_per_process:
        index = index if index == "0" else None  # tpu:0 is the process's device; no other is
    return with_string(node, _target_string(ctx, index))


# A profile's one_device_per_process: a process sees only its own device, as index 0 (see
# the module's docstring). Its device_index_dropped: ``torch.device("cuda", i)`` names the
# process's device by its rank: on tpu, and on xla, whose other device fixes already use the
# process's one device (torch_xla.device(), TPD003/TPD005), the index goes. A literal
# "cuda:1" stays "xla:1" there (one process may drive several).
DROP_INDEX = "device_call_index_dropped"


def _drop_index_of_device_call(ctx: FixContext) -> None:
    """``torch.device("cuda", local_rank)``: the follow-up drops the index (not a literal 0)."""
    arg = ctx.parent(ctx.original)
    call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
    if not (isinstance(call, cst.Call) and _is_device_call(call) and call.args[0] is arg):
        return
    index = arg_named(call, "index", 1)
    zero = index is not None and isinstance(index.value, cst.Integer) and index.value.value == "0"
    if index is not None and not zero:
        ctx.state.setdefault(DROP_INDEX, set()).add(id(call))


@follow_up("TPD002")
def drop_device_index(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    calls = ctx.state.get(DROP_INDEX)
    if not calls or id(original) not in calls or not isinstance(node, cst.Call):
        return None
    calls.discard(id(original))
    noted = cst.ensure_type(original, cst.Call)  # the state holds calls
    index = arg_named(noted, "index", 1)
    args = [a for a, o in zip(node.args, noted.args, strict=True) if o is not index]
    args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(args=args)


@fixer("TPD003")
def built_device_string(node: cst.BaseExpression, ctx: FixContext) -> Fixed:
    """f"cuda:{r}", "cuda:{}".format(r), "cuda:%d" % r, "cuda:" + str(r): replace the head."""
    head = _head_string(node)
    if head is None:
        raise NotApplicable("cannot find the literal head of the built string")
    if ctx.profile.device_index_dropped:  # the index names a device it cannot see, or one
        return ctx.target_device()  # torch_xla chooses
    if not ctx.profile.is_vendor:
        kind = ctx.profile.device_type_expr.replace('"', "'")
        if isinstance(node, cst.FormattedString) and isinstance(head, cst.FormattedStringText):
            parts = list(node.parts)  # the head is the first of them
            text = head.value.replace("cuda", "", 1)
            expr = cst.FormattedStringExpression(cst.parse_expression(kind))
            ctx.need("torch")
            rest = [cst.FormattedStringText(text)] if text else []
            return node.with_changes(parts=[expr, *rest, *parts[1:]])
        ctx.need("torch")
        if isinstance(node, cst.Call) and isinstance(head, cst.SimpleString):
            # "cuda:{}".format(r) -> "{}:{}".format(<type>, r)
            head_string = _swap(head, "cuda", "{}")
            func = node.func.with_changes(value=head_string)
            return prepend_arg(node.with_changes(func=func), cst.parse_expression(kind))
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            # "cuda:" + str(r) -> <type> + ":" + str(r)
            tail = _replace_head(node, "cuda", "")
            return cst.BinaryOperation(
                cst.parse_expression(kind),
                cst.Add(
                    whitespace_before=cst.SimpleWhitespace(" "),
                    whitespace_after=cst.SimpleWhitespace(" "),
                ),
                tail,
            )
        if isinstance(node, cst.BinaryOperation) and isinstance(node.left, cst.SimpleString):
            # "cuda:%d" % r -> "%s:%d" % (<type>, r)
            right = node.right
            values = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
            code = ", ".join([kind, *(code_of(v) for v in values)])
            return node.with_changes(
                left=_swap(node.left, "cuda", "%s"), right=cst.parse_expression(f"({code})")
            )
        raise NotApplicable("an unusual built device string; rewrite it as an f-string by hand")
    return _replace_head(node, "cuda", ctx.vendor_device())


def _head_string(node: cst.BaseExpression) -> cst.FormattedStringText | cst.SimpleString | None:
    if isinstance(node, cst.FormattedString):
        first = node.parts[0] if node.parts else None
        return first if isinstance(first, cst.FormattedStringText) else None
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return node.func.value if isinstance(node.func.value, cst.SimpleString) else None
    if isinstance(node, cst.BinaryOperation):
        left = node.left
        while isinstance(left, cst.BinaryOperation):
            left = left.left
        return left if isinstance(left, cst.SimpleString) else None
    return None


def _replace_head(node: cst.BaseExpression, old: str, new: str) -> cst.BaseExpression:
    """``node`` with ``old`` replaced in its literal head (the one ``_head_string`` found)."""
    if isinstance(node, cst.FormattedString) and node.parts:
        first = node.parts[0]
        if isinstance(first, cst.FormattedStringText):
            parts = [first.with_changes(value=first.value.replace(old, new, 1)), *node.parts[1:]]
            return node.with_changes(parts=parts)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        s = node.func.value
        if isinstance(s, cst.SimpleString):
            return node.with_changes(func=node.func.with_changes(value=_swap(s, old, new)))
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.left, cst.BinaryOperation):
            return node.with_changes(left=_replace_head(node.left, old, new))
        if isinstance(node.left, cst.SimpleString):
            return node.with_changes(left=_swap(node.left, old, new))
    raise NotApplicable("unsupported built string")


def _swap(s: cst.SimpleString, old: str, new: str) -> cst.SimpleString:
    return s.with_changes(value=s.value.replace(old, new, 1))


@fixer("TPD004")
def is_cuda(node: cst.Attribute, ctx: FixContext) -> Fixed:
    if ctx.profile.tensor_flag:
        return node.with_changes(attr=cst.Name(ctx.profile.tensor_flag))
    op = "==" if ctx.profile.is_vendor else "!="
    name = ctx.profile.device or "cpu"
    return cst.parse_expression(f'{code_of(node.value)}.device.type {op} "{name}"')


@fixer("TPD005")
def integer_device_id(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if isinstance(node, cst.Arg):  # device_ids= / output_device= / device=<int>
        keyword = node.keyword.value if node.keyword else ""
        if keyword in ("device_ids", "output_device"):
            return REMOVE_ARG
        return node.with_changes(value=_indexed_device(node.value, ctx))
    if isinstance(node, cst.Call) and node.args:
        first = node.args[0]
        new_first = first.with_changes(value=_indexed_device(first.value, ctx))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
            return node.with_changes(args=[new_first, *node.args[1:]])
        return new_first.value  # torch.device(rank) -> the device expression itself
    raise NotApplicable("unexpected shape for an integer device id")


def _indexed(ctx: FixContext) -> bool:
    """Whether the target's devices are the program's indices (``torch.device(t, i)``)."""
    return ctx.profile.is_vendor and not ctx.profile.device_index_dropped


def _indexed_device(index: cst.BaseExpression, ctx: FixContext) -> cst.BaseExpression:
    if not ctx.profile.is_vendor:
        return ctx.expr(f"torch.device({ctx.profile.device_type_expr}, {code_of(index)})")
    if _indexed(ctx):
        return ctx.expr(f'torch.device("{ctx.profile.device}", {code_of(index)})')
    if ctx.profile.device_expr.startswith('"'):  # the process's one device, by its type
        return ctx.expr(f"torch.device({ctx.profile.device_expr})")
    return ctx.target_device()  # a call that answers the process's device


REMOVE_ARG = cst.RemoveFromParent()


# What a device-management call means on a machine with no accelerator (accelerator target).
ON_CPU = {
    "torch.accelerator.current_device_index": "0",
    "torch.accelerator.set_device_index": "None",
    "torch.accelerator.device_index": "contextlib.nullcontext()",
}


def _simple_call(to: str) -> Fixer:
    """A fixer that swaps the callee of a call, keeping its arguments."""

    def fix(node: cst.CSTNode, ctx: FixContext) -> Fixed:
        if not isinstance(node, cst.Call):
            raise NotApplicable("reference is not called")
        call = node.with_changes(func=ctx.expr(to))
        if code_of(node.func).endswith("device_of") and node.args:  # device_of(t): t's index
            index = cst.parse_expression(f"{code_of(node.args[0].value)}.device.index")
            call = call.with_changes(args=[node.args[0].with_changes(value=index)])
        if not ctx.profile.may_lack_device or to not in ON_CPU:
            return call
        if "contextlib" in ON_CPU[to]:
            ctx.need("contextlib")
        return ctx.expr(guarded(ctx.target, code_of(call), ON_CPU[to]))

    return fix


RENAMES = {
    # rule: (tpu/neuron/accelerator callee, xla callee or None for removal)
    "TPD006": ("torch.accelerator.is_available", None),
    "TPD008": (
        "torch.accelerator.device_count",
        "torch_xla.runtime.addressable_runtime_device_count",
    ),
    "TPD009": ("torch.accelerator.current_device_index", "torch_xla.runtime.local_ordinal"),
    "TPD010": ("torch.accelerator.set_device_index", None),
    "TPD017": ("torch.accelerator.device_index", None),
}

# Selecting a device: nothing to select where a process has one (tpu), or removed (xla).
SELECTS_DEVICE = frozenset({"TPD010", "TPD017"})

# where neither rename applies: xla's TPD017 is left for a human (one device per process)
NOT_RENAMED = {"TPD017": frozenset({"xla"})}

for _code_, (_portable, _xla) in RENAMES.items():
    # tpu's own fixers select nothing for SELECTS_DEVICE (set_device_xla, TPD017's below)
    fixer(_code_, ALL_KINDS, but=NOT_RENAMED.get(_code_, frozenset()))(_simple_call(_portable))
    if _xla:
        fixer(_code_, {"xla"})(_simple_call(_xla))


@fixer("TPD006", {"xla"})
def cuda_available_xla(node: cst.Call, ctx: FixContext) -> Fixed:
    return cst.Name("True")


@fixer("TPD010", {"xla", "tpu"})
def set_device_xla(node: cst.Call, ctx: FixContext) -> Fixed:
    """torch_xla assigns one device per process; TorchTPU's process has one, tpu:0, and its
    set_device is internal (and refuses any other index): the statement goes."""
    if not isinstance(node, cst.Call):
        raise NotApplicable("a reference to set_device, not a call: remove it by hand")
    return REMOVE_STATEMENT


DEVICE_CONTEXT = "device_context_dropped"


@fixer("TPD017", {"tpu"})
def device_context_one_device(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``with torch.cuda.device(i):`` selects the device the process already has: the block
    becomes its body (TPD017's follow-up); elsewhere the call is a context that does nothing."""
    if not isinstance(node, cst.Call):
        raise NotApplicable("torch.cuda.device used without a call; check by hand")
    item = ctx.parent(ctx.original)
    if isinstance(item, cst.WithItem) and item.asname is None:
        ctx.state.setdefault(DEVICE_CONTEXT, set()).add(id(item))
        return node
    return ctx.expr("contextlib.nullcontext()")


@follow_up("TPD017")
def device_context_block(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    dropped = ctx.state.get(DEVICE_CONTEXT)
    if not dropped or not isinstance(original, cst.With) or not isinstance(node, cst.With):
        return None
    keep = [n for n, o in zip(node.items, original.items, strict=True) if id(o) not in dropped]
    if len(keep) == len(node.items):
        return None
    dropped.difference_update(id(o) for o in original.items)
    if keep:
        keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(items=keep)
    return body_of(node)


@fixer("TPD011")
def device_name(node: cst.Call, ctx: FixContext) -> Fixed:
    return ctx.expr("str(torch.accelerator.current_accelerator())")


@fixer("TPD011", {"xla"})
def device_name_xla(node: cst.Call, ctx: FixContext) -> Fixed:
    return ctx.expr("torch_xla.runtime.device_type()")


@fixer("TPD015", VENDOR)
def bf16_supported(node: cst.Call, ctx: FixContext) -> Fixed:
    return cst.Name("True")


@fixer("TPD007")
def cuda_else_cpu(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """Keep the program's own choice and rewrite what it chooses between.

    The test keeps its meaning (``--no-cuda``, ``use_cuda``, an MPS arm still decide), with
    ``torch.cuda.is_available()`` asked of the target in the same pass; the CUDA arm names the
    target's device. Only a test the target answers as a constant (``True`` on xla) folds to
    the arm it takes."""
    if not isinstance(node, cst.IfExp | cst.If):
        raise NotApplicable("unexpected node for a cuda-else-cpu choice")
    test = as_expression(node.test.visit(_AvailabilityAsked(ctx)))
    arm_names = ("body", "orelse")
    # the original's arms: a built string in the arm (f"cuda:{r}") is already rewritten
    cuda_arm = next((a for a in arm_names if _mentions_cuda(getattr(ctx.original, a))), None)
    if cuda_arm is None:
        raise NotApplicable("neither arm names a CUDA device")
    arm = getattr(node, cuda_arm).visit(_ArmDevices(ctx))
    new = node.with_changes(test=test, **{cuda_arm: arm})
    try:
        value = bool(_constant_value(astparse.parse(code_of(test).strip(), mode="eval").body))
    except (SyntaxError, ValueError, TypeError, KeyError, IndexError):
        value = None
    if value is not None:
        return _folded(new, value, ctx)
    if isinstance(new, cst.IfExp) and not ctx.profile.is_vendor:
        arg = ctx.parent(ctx.original)
        call = ctx.parent(arg) if isinstance(arg, cst.Arg) else None
        if isinstance(call, cst.Call) and _is_device_call(call) and len(call.args) == 1:
            ctx.state.setdefault(ACCEL_IDIOM, set()).add(id(call))
    return new


def _folded(node: cst.IfExp | cst.If, value: bool, ctx: FixContext) -> Fixed:
    """The arm a constant test takes, without the dead one (an ``elif`` folds into its chain)."""
    if isinstance(node, cst.IfExp):
        return node.body if value else node.orelse
    parent = ctx.parent(ctx.original)
    is_elif = isinstance(parent, cst.If) and parent.orelse is ctx.original
    if value:
        if is_elif:
            return cst.Else(body=node.body)
        return _statements_with_lines(block_lines(node.body), node.leading_lines)
    if node.orelse is None:
        return cst.RemoveFromParent()
    if isinstance(node.orelse, cst.If):
        if is_elif:
            return node.orelse
        return node.orelse.with_changes(leading_lines=node.leading_lines)
    if is_elif:
        return node.orelse
    return _statements_with_lines(block_lines(node.orelse.body), node.leading_lines)


def _statements_with_lines(
    statements: list[Statement], leading_lines: Sequence[cst.EmptyLine]
) -> cst.FlattenSentinel[Statement]:
    statements = list(statements)
    statements[0] = statements[0].with_changes(
        leading_lines=[*leading_lines, *statements[0].leading_lines]
    )
    return cst.FlattenSentinel(statements)


def _is_device_call(node: cst.Call) -> bool:
    name = dotted(node.func) or ""
    return name == "device" or name.endswith(".device")


class _AvailabilityAsked(cst.CSTTransformer):
    """``torch.cuda.is_available()`` in a device choice's test, asked of the target by the
    rule that owns it (TPD006), which the choice's finding supersedes."""

    def __init__(self, ctx: FixContext) -> None:
        super().__init__()
        self.ctx = ctx

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = dotted(original.func) or ""
        if not (name == "cuda.is_available" or name.endswith(".cuda.is_available")):
            return updated
        return as_expression(FIXERS[("TPD006", self.ctx.target)].fn(updated, self.ctx))


class _ArmDevices(cst.CSTTransformer):
    """The CUDA arm's devices, spelled for the target. On the accelerator target that arm
    runs where the program found its GPU, so it names the current accelerator directly."""

    def __init__(self, ctx: FixContext) -> None:
        super().__init__()
        self.ctx = ctx

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.ctx.profile.is_vendor or not _is_device_call(original):
            return updated
        if len(original.args) != 1 or original.args[0].keyword is not None:
            return updated
        value = string_value(original.args[0].value)
        if value is None or not CUDA_STRING.match(value):
            return updated
        index = value.partition(":")[2]
        if index:
            return self.ctx.expr(f"torch.device({ACCELERATOR_CURRENT}.type, {index})")
        return self.ctx.expr(ACCELERATOR_CURRENT)

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        # `(current_accelerator(check_available=True) or cpu).type` from a built string
        # (f"cuda:{r}") in this arm: here the accelerator is the one the program found
        if (
            not self.ctx.profile.is_vendor
            and updated.attr.value == "type"
            and isinstance(updated.value, cst.BooleanOperation)
            and "current_accelerator(check_available=True)" in code_of(updated.value)
        ):
            return self.ctx.expr(f"{ACCELERATOR_CURRENT}.type")
        return updated

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.BaseExpression:
        value = string_value(updated)
        if value is None or not CUDA_STRING.match(value):
            return updated
        if self.ctx.profile.is_vendor:
            return as_expression(device_string(updated, self.ctx))
        index = value.partition(":")[2]
        kind = f"{ACCELERATOR_CURRENT}.type"
        return self.ctx.expr(f'f"{{{kind}}}:{index}"' if index else kind)


ACCELERATOR_CURRENT = "torch.accelerator.current_accelerator()"
ACCEL_IDIOM = "accelerator_idiom"


@follow_up("TPD007")
def accelerator_idiom(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """``torch.device(A.type if torch.accelerator.is_available() else "cpu")`` -> the idiom of
    the ``torch.accelerator`` docs: ``A if torch.accelerator.is_available() else
    torch.device("cpu")``, a device, not a device built from its own name."""
    calls = ctx.state.get(ACCEL_IDIOM)
    if not calls or id(original) not in calls or not isinstance(node, cst.Call):
        return None
    calls.discard(id(original))
    choice = node.args[0].value
    if not isinstance(choice, cst.IfExp):
        return None
    arms = {}
    for name in ("body", "orelse"):
        arm = getattr(choice, name)
        if (
            isinstance(arm, cst.Attribute)
            and arm.attr.value == "type"
            and code_of(arm.value).endswith("accelerator.current_accelerator()")
        ):
            arms[name] = arm.value
        elif string_value(arm) is not None:
            arms[name] = node.with_changes(args=[node.args[0].with_changes(value=arm)])
        else:
            return None
    return choice.with_changes(**arms, lpar=[], rpar=[])


def _mentions_cuda(node: cst.CSTNode) -> bool:
    return any(CUDA_STRING.match(s) or s.startswith("cuda:") for s in _strings(node))


def _strings(node: cst.CSTNode) -> list[str]:
    collector = _StringCollector()
    node.visit(collector)
    return collector.values


class _StringCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.values: list[str] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None:
            self.values.append(value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.values.append(node.value)  # f"cuda:{rank}" names a CUDA device too


@fixer("TPD014", {"tpu", "neuron"})
def capability_branch(node: cst.BaseExpression, ctx: FixContext) -> Fixed:
    """Evaluate the test as a modern (bf16-capable, Hopper-class) GPU would answer it."""
    code = code_of(node)
    code = re.sub(r"[\w.]*get_device_capability\([^()]*\)", "(9, 0)", code)
    code = re.sub(r"[\w.]*is_bf16_supported\([^()]*\)", "True", code)
    code = re.sub(r"[\w.]*get_device_properties\([^()]*\)\.major", "9", code)
    code = re.sub(r"[\w.]*get_device_properties\([^()]*\)\.minor", "0", code)
    try:
        value = bool(_constant_value(astparse.parse(code.strip(), mode="eval").body))
    except (SyntaxError, ValueError) as exc:
        raise NotApplicable(f"cannot evaluate the capability test: {exc}") from exc
    branch = ctx.parent(ctx.original)
    if isinstance(branch, cst.If | cst.IfExp) and branch.test is ctx.original:
        ctx.state.setdefault(FOLD, {})[id(branch)] = value
    return cst.Name("True" if value else "False")


# What the target answers for a CUDA device's compute capability: a modern GPU's, as TPD014
# does for a capability branch.
MODERN_CAPABILITY = {"major": 9, "minor": 0}


@fixer("TPD027", VENDOR, but={"xla"})
def capability_properties(node: cst.Call, ctx: FixContext) -> Fixed:
    """``torch.cuda.get_device_properties(d)`` read only for ``.major``/``.minor`` (the
    matcher checked every use) -> ``types.SimpleNamespace(major=9, minor=0)``: the call
    raises on a torch without CUDA, and a generation check behind a ``cuda.is_available()``
    that became ``accelerator.is_available()`` reaches it on the target."""
    ctx.need("types")
    fields = ", ".join(f"{k}={v}" for k, v in MODERN_CAPABILITY.items())
    return cst.parse_expression(f"types.SimpleNamespace({fields})")


FOLD = "fold_branches"


@follow_up("TPD014")
def fold_branch(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """``x if True else y`` -> ``x``; ``if True: a else: b`` -> ``a`` (an ``elif`` folds into
    its chain): the arm the target takes, without dead code."""
    folds = ctx.state.get(FOLD)
    if not folds or id(original) not in folds:
        return None
    value = folds.pop(id(original))
    if not isinstance(node, cst.IfExp | cst.If):
        return None
    return _folded(node, value, ctx)


_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


def _constant_value(node: ast.AST) -> Any:  # a constant of the program's: any type
    """Evaluate constants, tuples, indexing, comparisons and boolean logic; nothing else.

    The expression comes from the repository under migration: it is never ``eval``-ed.
    """
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_constant_value(e) for e in node.elts)
    if isinstance(node, ast.Subscript):
        return _constant_value(node.value)[_constant_value(node.slice)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _constant_value(node.operand)
    if isinstance(node, ast.BoolOp):  # short-circuits, as Python does
        for value in node.values:
            result = _constant_value(value)
            if bool(result) != isinstance(node.op, ast.And):
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _constant_value(node.left)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _constant_value(right_node)
            if type(op) not in _COMPARE or not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError(f"unsupported expression {type(node).__name__}")


@fixer("TPD016")
def device_type_compare(node: cst.Comparison | cst.Call, ctx: FixContext) -> Fixed:
    """A test of a device's name follows the name's rename (TPD002): ``== "cuda"`` compares
    with the target's name, ``.startswith("cuda")`` tests its prefix. On the accelerator
    target, whose device name is only known at run time, the test asks "not the CPU"."""
    _refuse_if_the_arm_stays_cuda(node, ctx)
    if isinstance(node, cst.Call):
        return _prefix_test(node, ctx)
    if not isinstance(node, cst.Comparison):
        raise NotApplicable("not a comparison")

    def swap(expr: cst.BaseExpression) -> cst.BaseExpression:
        if isinstance(expr, cst.Tuple | cst.List | cst.Set):
            if not ctx.profile.is_vendor:
                raise NotApplicable(
                    'a membership test in a list of device kinds: whether it asks "is this an '
                    'accelerator" (then `x.type != "cpu"`) only the program can say; check by hand'
                )
            return expr.with_changes(
                elements=[e.with_changes(value=swap(e.value)) for e in expr.elements]
            )
        value = string_value(expr)
        if value is None or not CUDA_STRING.match(value) or not isinstance(expr, cst.SimpleString):
            return expr
        return with_string(expr, ctx.profile.device or "cpu")

    left = swap(node.left)
    targets = []
    for target in node.comparisons:
        comp = target.with_changes(comparator=swap(target.comparator))
        if not ctx.profile.is_vendor:
            comp = comp.with_changes(operator=_negate(comp.operator))
        targets.append(comp)
    return node.with_changes(left=left, comparisons=targets)


def _refuse_if_the_arm_stays_cuda(node: cst.CSTNode, ctx: FixContext) -> None:
    """A test whose CUDA arm holds what the port leaves for the LLM or a human stays as it
    is: the target then takes the other arm, as the original does without CUDA
    (``cuda_arm``, whose prescan found them)."""
    why = ctx.state.get(cuda_arm.KEPT, {}).get(id(ctx.original))
    if why is not None:
        raise NotApplicable(why)


def _prefix_test(node: cst.Call, ctx: FixContext) -> cst.BaseExpression:
    """``d.startswith("cuda")`` -> ``d.startswith("tpu")``; on the accelerator target
    ``not d.startswith("cpu")`` (parenthesised where an operator binds tighter)."""
    first = node.args[0] if len(node.args) == 1 else None
    literal = first.value if first is not None else None
    value = string_value(literal)
    if first is None or not isinstance(literal, cst.SimpleString) or value is None:
        raise NotApplicable("not a prefix test against a CUDA device name")
    if not value.startswith("cuda"):
        raise NotApplicable("not a prefix test against a CUDA device name")
    if ctx.profile.is_vendor:
        name = value.replace("cuda", ctx.vendor_device(), 1)
        return node.with_changes(args=[first.with_changes(value=with_string(literal, name))])
    call = node.with_changes(args=[first.with_changes(value=with_string(literal, "cpu"))])
    parent = ctx.parent(ctx.original)
    if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
        ctx.state.setdefault(NOT_NEGATED, set()).add(id(parent))  # `not not`: the follow-up
        return call
    test = cst.UnaryOperation(operator=cst.Not(), expression=call)
    if isinstance(parent, NOT_BINDS_LOOSER):
        return test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return test


NOT_NEGATED = "prefix_test_negated"


@follow_up("TPD016")
def double_negation(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    """``not d.startswith("cuda")`` on the accelerator target: ``d.startswith("cpu")``, not
    ``not not d.startswith("cpu")``."""
    negated = ctx.state.get(NOT_NEGATED)
    if not negated or id(original) not in negated or not isinstance(node, cst.UnaryOperation):
        return None
    negated.discard(id(original))
    return node.expression.with_changes(lpar=node.lpar, rpar=node.rpar)


# Where a ``not ...`` in place of a call needs parentheses: an operator binds tighter.
NOT_BINDS_LOOSER = (
    cst.Comparison,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.Attribute,
    cst.Subscript,
    cst.Await,
)


def _negate(op: cst.BaseCompOp) -> cst.BaseCompOp:
    swaps = {
        cst.Equal: cst.NotEqual,
        cst.NotEqual: cst.Equal,
        cst.In: cst.NotIn,
        cst.NotIn: cst.In,
    }
    new = swaps.get(type(op))
    if new is None or not isinstance(op, cst.Equal | cst.NotEqual | cst.In | cst.NotIn):
        raise NotApplicable("comparison operator has no negation")
    if new in (cst.NotIn,):
        return cst.NotIn(
            whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after
        )
    return new(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)


LEGACY_TYPES = {
    "FloatTensor": "float32",
    "DoubleTensor": "float64",
    "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64",
    "IntTensor": "int32",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "ByteTensor": "uint8",
    "BoolTensor": "bool",
}


def _sizes(call: cst.Call) -> bool:
    """The legacy constructor's arguments are a shape: integer literals, several
    positional arguments, or ``*shape`` (one other argument may be data)."""
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) > 1 or any(a.star == "*" for a in positional):
        return True
    return all(_integer(a.value) for a in positional) and bool(positional)


def _integer(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.UnaryOperation):
        value = value.expression
    return isinstance(value, cst.Integer)


@fixer("TPD018")
def legacy_tensor_type(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``torch.cuda.FloatTensor(2, 3)`` -> ``torch.empty(2, 3, dtype=torch.float32, device=...)``;
    with a list, ``torch.tensor(...)``. Type checks and ``.type(...)`` casts stay manual."""
    if not isinstance(node, cst.Call):
        raise NotApplicable(
            "a legacy CUDA type used as a type (isinstance/.type); check .device and .dtype by hand"
        )
    name = code_of(node.func).rsplit(".", 1)[-1]
    dtype = LEGACY_TYPES.get(name)
    if dtype is None:
        raise NotApplicable(f"unknown legacy tensor type {name}")
    data = len(node.args) == 1 and isinstance(node.args[0].value, cst.List | cst.Tuple)
    if not data and not _sizes(node):
        # one argument that may be data (an array, ``self.mean``) or a size (``n``): the
        # legacy CPU constructor decides as the CUDA one did, then the tensor moves
        cpu = node.with_changes(func=ctx.expr(f"torch.{name}"))
        return ctx.expr("x.to()").with_changes(
            func=cst.Attribute(value=cpu, attr=cst.Name("to")), args=[cst.Arg(ctx.device_expr())]
        )
    func = ctx.expr("torch.tensor" if data else "torch.empty")
    call = node.with_changes(func=func)
    call = set_kwarg(call, "dtype", ctx.expr(f"torch.{dtype}"))
    return set_kwarg(call, "device", ctx.device_expr())
