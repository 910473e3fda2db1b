"""``nn.DataParallel`` becomes the model itself on targets with one device per process (TPN005).

DataParallel replicates a module over the GPUs of one process; its scatter and replicate are
CUDA kernels, and on a machine with one device it is only a call of ``.module``. TorchTPU,
TorchNeuron and PyTorch/XLA run one process per device, so the port keeps the model unwrapped
(scaling out is DistributedDataParallel under torchrun, a human's decision). Two things change
with the wrapper and are rewritten with it, in the whole file: ``model.module`` is ``model``,
and ``model.load_state_dict(sd)`` drops the ``module.`` prefix that the original's checkpoints
carry, so the port still loads them (its own checkpoints carry no prefix). A wrapper whose
DataParallel-only attributes are used (``device_ids``, ``isinstance(m, DataParallel)``, ...)
is left for a human.
"""

from __future__ import annotations

import libcst as cst

from .base import REMOVE_STATEMENT, FixContext, NotApplicable, code_of, dotted, follow_up, prescan
from .base import fixer as register

HOLDERS = "data_parallel_holders"  # holder text -> None (safe) or why it is left for a human
PARAMETERS = ("module", "device_ids", "output_device", "dim")  # DataParallel(...)'s, in order
ONLY_ON_THE_WRAPPER = frozenset(
    {"device_ids", "output_device", "src_device_obj", "dim", "scatter", "gather", "replicate"}
)
STRIP_PREFIX = '{{k.removeprefix("module."): v for k, v in {state}.items()}}'


def _is_data_parallel(node: cst.BaseExpression) -> bool:
    name = dotted(node)
    return name is not None and name.split(".")[-1] == "DataParallel"


def _wrapped_call(value: cst.BaseExpression) -> cst.Call | None:
    """The ``DataParallel(...)`` call of ``DataParallel(m).cuda()`` / ``.to(d)``, or of itself."""
    while True:
        if not isinstance(value, cst.Call):
            return None
        if _is_data_parallel(value.func):
            return value
        if not (isinstance(value.func, cst.Attribute) and value.func.attr.value in ("cuda", "to")):
            return None
        value = value.func.value


class _Wrappers(cst.CSTVisitor):
    """Who holds a DataParallel, and whether a use of it needs the wrapper itself."""

    def __init__(self) -> None:
        self.holders: dict[str, str | None] = {}
        self.attributes: list[tuple[str, str]] = []
        self.checks: list[str] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and _wrapped_call(node.value) is not None:
            holder = dotted(node.targets[0].target)
            if holder is not None:
                self.holders[holder] = None

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in ONLY_ON_THE_WRAPPER:
            self.attributes.append((code_of(node.value), node.attr.value))

    def visit_Call(self, node: cst.Call) -> None:
        if dotted(node.func) == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].value
            kinds = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
            if any(_is_data_parallel(kind) for kind in kinds):
                self.checks.append(code_of(node.args[0].value))


@prescan("TPN005")
def wrappers(module: cst.Module, lines: list[int], target: str) -> dict:
    found = _Wrappers()
    module.visit(found)
    holders = found.holders
    for holder, attribute in found.attributes:
        if holder in holders:
            holders[holder] = f"`{holder}.{attribute}` needs the DataParallel wrapper itself"
    for holder in found.checks:
        if holder in holders:
            holders[holder] = f"`isinstance({holder}, DataParallel)` decides what the code does"
    return {HOLDERS: holders} if holders else {}


def _holder(ctx: FixContext) -> str:
    node = ctx.original
    while node is not None and not isinstance(node, cst.Assign):
        if isinstance(node, cst.BaseStatement):
            break
        node = ctx.parent(node)
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        holder = dotted(node.targets[0].target)
        if holder is not None:
            return holder
    raise NotApplicable(
        "the DataParallel is not assigned to a variable, so its `.module` uses cannot be followed"
    )


@register("TPN005", {"tpu", "neuron", "xla"})
def data_parallel(node: cst.CSTNode, ctx: FixContext):
    if not isinstance(node, cst.Call) or not _is_data_parallel(node.func):
        raise NotApplicable("a DataParallel reference, not a call that wraps a model")
    holder = _holder(ctx)
    why = ctx.state.get(HOLDERS, {}).get(holder)
    if why:
        raise NotApplicable(why)
    arguments = {}
    for position, arg in enumerate(node.args):
        if arg.star:
            raise NotApplicable("arguments passed with * or **")
        name = arg.keyword.value if arg.keyword else PARAMETERS[min(position, len(PARAMETERS) - 1)]
        arguments[name] = arg.value
    wrapped = arguments.get("module")
    if wrapped is None:
        raise NotApplicable("no module argument")
    if code_of(wrapped) == holder and isinstance(ctx.parent(ctx.original), cst.Assign):
        return REMOVE_STATEMENT  # model = DataParallel(model): nothing is left to do
    return wrapped


@follow_up("TPN005")
def wrapper_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext):
    holders = {h for h, why in ctx.state.get(HOLDERS, {}).items() if why is None}
    if not holders:
        return None
    if (
        isinstance(original, cst.Attribute)
        and original.attr.value == "module"
        and code_of(original.value) in holders
        and isinstance(node, cst.Attribute)
    ):
        return node.value
    if (
        isinstance(original, cst.Call)
        and isinstance(original.func, cst.Attribute)
        and original.func.attr.value == "load_state_dict"
        and code_of(original.func.value) in holders
        and isinstance(node, cst.Call)
        and node.args
        and not node.args[0].star
        and not node.args[0].keyword
    ):
        state = node.args[0].value
        text = code_of(state)
        if not isinstance(state, cst.Name | cst.Attribute | cst.Subscript | cst.Call):
            text = f"({text})"
        stripped = cst.parse_expression(STRIP_PREFIX.format(state=text))
        return node.with_changes(args=[node.args[0].with_changes(value=stripped), *node.args[1:]])
    return None
