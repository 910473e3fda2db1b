"""``nn.DataParallel`` becomes the model itself on targets with one device per process (TPN009).

DataParallel replicates a module over the GPUs of one process; its scatter and replicate are
CUDA kernels, and on a machine with one device it is only a call of ``.module``. TorchTPU,
TorchNeuron and PyTorch/XLA run one process per device, so the port keeps the model unwrapped
(scaling out is DistributedDataParallel under torchrun, a human's decision). Two things change
with the wrapper and are rewritten with it, in the whole file: ``model.module`` is ``model``,
and ``model.load_state_dict(sd)`` drops the ``module.`` prefix that the original's checkpoints
carry, so the port still loads them (its own checkpoints carry no prefix). A wrapper whose
DataParallel-only attributes are used (``device_ids``, ``isinstance(m, DataParallel)``, ...)
is not matched by the scanner (it stays TPN005, for a human).

A variable that another wrapper still wraps in the same file (``model = DDP(model)`` in the
distributed branch, DataParallel in the other) is the wrapper on some paths and the model on
others; unconditional rewrites would break the wrapped path (``--resume`` under DDP: missing
``module.`` keys). There the rewrites test the object at run time: ``.module`` becomes
``getattr(model, "module", model)`` and the keys lose their prefix only when the model being
loaded into has no ``.module`` (is no longer wrapped).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

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
)

HOLDERS = "data_parallel_holders"  # the variables that held a DataParallel
STILL_WRAPPED = "data_parallel_holders_still_wrapped"  # ... that another wrapper still wraps
WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel", "FullyShardedDataParallel"})
PARAMETERS = ("module", "device_ids", "output_device", "dim")  # DataParallel(...)'s, in order
STRIP_PREFIX = '{{k.removeprefix("module."): v for k, v in {state}.items()}}'
# the holder is still a wrapper on some path: strip only when it is not (it has no .module)
STRIP_PREFIX_UNWRAPPED = (
    '{{(k if hasattr({holder}, "module") else k.removeprefix("module.")): v'
    " for k, v in {state}.items()}}"
)


def _is_data_parallel(node: cst.BaseExpression) -> bool:
    name = dotted(node)
    return name is not None and name.split(".")[-1] == "DataParallel"


class _Holders(cst.CSTVisitor):
    """The DataParallel holders the scanner matched, and every variable some other wrapper
    (DDP, FSDP, a DataParallel left as it is) is assigned to."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: set[int]) -> None:
        self.lines: set[int] = lines
        self.found: set[str] = set()
        self.wrapped: set[str] = set()  # holders of a wrapper that stays
        self.aliases: dict[str, str] = {}  # from torch.nn.parallel import X as Y: Y -> X

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is not None and isinstance(node.asname.name, cst.Name):
            self.aliases[node.asname.name.value] = code_of(node.name).split(".")[-1]

    def visit_Assign(self, node: cst.Assign) -> None:
        line = self.get_metadata(PositionProvider, node).start.line
        holder = dotted(node.targets[0].target) if len(node.targets) == 1 else None
        if holder is None:
            return
        if line in self.lines:
            self.found.add(holder)
        elif self._wrapper(node.value):
            self.wrapped.add(holder)

    def _wrapper(self, value: cst.BaseExpression) -> bool:
        """``DDP(m)``, also moved: ``DistributedDataParallel(m).cuda()``."""
        while isinstance(value, cst.Call):
            name = dotted(value.func)
            if name is not None:
                last = name.split(".")[-1]
                if self.aliases.get(last, last) in WRAPPERS:
                    return True
            if not isinstance(value.func, cst.Attribute):
                return False
            value = value.func.value
        return False


@prescan("TPN009")
def wrappers(module: cst.Module, lines: list[int], target: str) -> dict:
    """The variables the scanner found holding a DataParallel it may unwrap: their uses may
    come before the wrap in the file (a helper defined above ``main``)."""
    found = _Holders(set(lines))
    MetadataWrapper(module, unsafe_skip_copy=True).visit(found)
    if not found.found:
        return {}
    return {HOLDERS: found.found, STILL_WRAPPED: found.found & found.wrapped}


def _unwrap(value: cst.BaseExpression) -> cst.BaseExpression:
    """``DataParallel(m, ...)`` -> ``m``, also inside ``DataParallel(m).to(d)``."""
    if not isinstance(value, cst.Call):
        raise NotApplicable("no DataParallel call here")
    if _is_data_parallel(value.func):
        arguments = {}
        for position, arg in enumerate(value.args):
            if arg.star:
                raise NotApplicable("arguments passed with * or **")
            name = arg.keyword.value if arg.keyword else PARAMETERS[min(position, 3)]
            arguments[name] = arg.value
        if "module" not in arguments:
            raise NotApplicable("no module argument")
        return arguments["module"]
    if not isinstance(value.func, cst.Attribute):
        raise NotApplicable("no DataParallel call here")
    inner = _unwrap(value.func.value)
    return value.with_changes(func=value.func.with_changes(value=inner))


@fixer("TPN009", {"vendor"})  # every vendor target
def data_parallel(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    if not isinstance(node, cst.Assign) or len(node.targets) != 1:
        raise NotApplicable("not an assignment of one DataParallel")
    holder = code_of(node.targets[0].target)
    unwrapped = _unwrap(node.value)
    if code_of(unwrapped) == holder:
        return REMOVE_STATEMENT  # model = DataParallel(model): nothing is left to do
    return node.with_changes(value=unwrapped)


@follow_up("TPN009")
def wrapper_uses(original: cst.CSTNode, node: cst.CSTNode, ctx: FixContext) -> Fixed | None:
    holders = ctx.state.get(HOLDERS)
    if not holders:
        return None
    if (
        isinstance(original, cst.Attribute)
        and original.attr.value == "module"
        and code_of(original.value) in holders
        and isinstance(node, cst.Attribute)
    ):
        if code_of(original.value) in ctx.state.get(STILL_WRAPPED, ()):
            return cst.parse_expression(
                f'getattr({code_of(node.value)}, "module", {code_of(node.value)})'
            )
        return node.value
    if (
        isinstance(original, cst.Call)
        and isinstance(original.func, cst.Attribute)
        and original.func.attr.value == "load_state_dict"
        and code_of(original.func.value) in holders
        and isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.args
        and not node.args[0].star
        and not node.args[0].keyword
    ):
        state = node.args[0].value
        text = code_of(state)
        if not isinstance(state, cst.Name | cst.Attribute | cst.Subscript | cst.Call):
            text = f"({text})"
        holder = code_of(original.func.value)
        if holder in ctx.state.get(STILL_WRAPPED, ()):
            stripped = cst.parse_expression(
                STRIP_PREFIX_UNWRAPPED.format(holder=code_of(node.func.value), state=text)
            )
        else:
            stripped = cst.parse_expression(STRIP_PREFIX.format(state=text))
        return node.with_changes(args=[node.args[0].with_changes(value=stripped), *node.args[1:]])
    return None
