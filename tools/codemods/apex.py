"""Codemods for NVIDIA apex's fused optimizers and norms (TPK007, TPK008) and its
data parallelism (TPK009).

apex's fused classes compute what a ``torch.optim`` optimizer or a ``torch.nn`` norm
computes; only their signatures and defaults differ. A port is one call rewritten with
apex's defaults made explicit where torch's differ (``FusedAdam``'s ``weight_decay`` is 0,
``AdamW``'s 0.01; ``FusedRMSNorm``'s ``eps`` is 1e-5, ``RMSNorm``'s the dtype's epsilon).
An argument torch has no counterpart for is dropped only when its value changes nothing;
otherwise the call is refused with the reason, as are the optimizers torch lacks.

The tables are apex's signatures (``apex/optimizers/*.py``, ``apex/normalization``);
the reference stand-ins in ``sandbox/shim/standins/apex.py`` compute the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import libcst as cst

from .base import FixContext, NotApplicable, code_of, dotted, set_kwarg
from .base import fixer as register
from .library_names import last_name, register_aliases


@dataclass(frozen=True)
class Port:
    """How one apex class becomes a torch one.

    ``signature``: apex's parameters in order (a positional argument is named by it);
    ``positional``: how many leading arguments stay positional (the same place in torch);
    ``explicit``: apex defaults torch does not share, added when the call leaves them out;
    ``neutral``: apex-only arguments and the literal values at which they change nothing
    on the target (dropped; ``ANY``: whatever the value, as for a bucket size); any other
    value, or an apex-only argument not listed, is refused with ``refused``'s reason (or a
    generic one).
    """

    torch: str
    signature: tuple[str, ...]
    positional: int
    explicit: dict[str, str] = field(default_factory=dict)
    neutral: dict[str, tuple[str, ...]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    torch_args: frozenset[str] = frozenset()


_ADAM_SIGNATURE = (
    "params",
    "lr",
    "bias_correction",
    "betas",
    "eps",
    "adam_w_mode",
    "weight_decay",
    "amsgrad",
    "set_grad_none",
    "capturable",
    "master_weights",
)
_ADAM_NEUTRAL = {
    "bias_correction": ("True",),
    "adam_w_mode": ("True", "False"),  # chose the class (below)
    "set_grad_none": ("True", "False"),  # grads None or zero after zero_grad(): same steps
    "capturable": ("False",),
    "master_weights": ("False",),
}
_ADAM_REFUSED = {
    "bias_correction": "torch's Adam always corrects the moments' bias",
    "master_weights": "torch.optim keeps no fp32 master copy of half-precision parameters "
    "(keep the model in fp32 under autocast instead)",
    "capturable": "capturable is for CUDA graphs",
    "adam_w_mode": "adam_w_mode is decided at run time: choose torch.optim.AdamW (True) or "
    "torch.optim.Adam (False)",
}
_ADAM_ARGS = frozenset({"params", "lr", "betas", "eps", "weight_decay", "amsgrad"})

OPTIMIZERS: dict[str, Port] = {
    # adam_w_mode=True (apex's default): decoupled weight decay, torch.optim.AdamW
    "FusedAdam": Port(
        "torch.optim.AdamW",
        _ADAM_SIGNATURE,
        2,
        explicit={"weight_decay": "0.0"},
        neutral=_ADAM_NEUTRAL,
        refused=_ADAM_REFUSED,
        torch_args=_ADAM_ARGS,
    ),
    "FusedSGD": Port(
        "torch.optim.SGD",
        (
            "params",
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "nesterov",
            "wd_after_momentum",
            "materialize_master_grads",
            "set_grad_none",
        ),
        6,
        neutral={
            "wd_after_momentum": ("False",),
            "materialize_master_grads": ("True", "False"),  # amp O2's master grads only
            "set_grad_none": ("True", "False"),
        },
        refused={"wd_after_momentum": "torch's SGD applies weight decay before momentum"},
        torch_args=frozenset({"params", "lr", "momentum", "dampening", "weight_decay", "nesterov"}),
    ),
    "FusedAdagrad": Port(
        "torch.optim.Adagrad",
        ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode"),
        2,
        neutral={"set_grad_none": ("True", "False"), "adagrad_w_mode": ("False",)},
        refused={"adagrad_w_mode": "torch's Adagrad has no decoupled weight decay"},
        torch_args=frozenset({"params", "lr", "eps", "weight_decay"}),
    ),
}
# The same, with apex's L2 weight decay: FusedAdam(adam_w_mode=False)
ADAM_L2 = "torch.optim.Adam"

NO_TORCH_OPTIMIZER = {
    "FusedLAMB": "LAMB",
    "FusedMixedPrecisionLamb": "LAMB",
    "FusedNovoGrad": "NovoGrad",
    "FusedLARS": "LARS",
    "FusedLANS": "LANS",
}

_NORM_SIGNATURE = ("normalized_shape", "eps", "elementwise_affine", "memory_efficient")
_NORM_NEUTRAL = {"memory_efficient": ("True", "False")}  # recomputes in backward: same values
NORMS: dict[str, Port] = {
    name: Port(
        torch,
        _NORM_SIGNATURE,
        3,
        explicit=explicit,
        neutral=_NORM_NEUTRAL,
        torch_args=frozenset({"normalized_shape", "eps", "elementwise_affine"}),
    )
    for name, torch, explicit in (
        ("FusedLayerNorm", "torch.nn.LayerNorm", {}),
        ("MixedFusedLayerNorm", "torch.nn.LayerNorm", {}),
        ("FusedRMSNorm", "torch.nn.RMSNorm", {"eps": "1e-5"}),
        ("MixedFusedRMSNorm", "torch.nn.RMSNorm", {"eps": "1e-5"}),
    )
}


ANY = ("*",)  # an argument that only tunes speed: dropped whatever its value

# apex.parallel: torch's own DistributedDataParallel computes the same
PARALLEL: dict[str, Port] = {
    "DistributedDataParallel": Port(
        "torch.nn.parallel.DistributedDataParallel",
        (
            "module",
            "message_size",
            "delay_allreduce",
            "shared_param",
            "allreduce_trigger_params",
            "retain_allreduce_buffers",
            "allreduce_always_fp32",
            "num_allreduce_streams",
            "allreduce_communicators",
            "gradient_average",
            "gradient_predivide_factor",
            "gradient_average_split_factor",
            "prof",
        ),
        1,
        neutral={
            # how the all-reduce is bucketed and scheduled: its speed, not its result
            **dict.fromkeys(
                (
                    "message_size",
                    "delay_allreduce",
                    "allreduce_trigger_params",
                    "prof",
                    "retain_allreduce_buffers",
                    "num_allreduce_streams",
                    "allreduce_communicators",
                    "allreduce_always_fp32",  # under autocast the gradients are fp32 already
                    "gradient_predivide_factor",  # divides before or after: the same average
                ),
                ANY,
            ),
            "gradient_average": ("True",),
            "shared_param": ("None",),
            "gradient_average_split_factor": ("None",),
        },
        refused={
            "gradient_average": "torch's DistributedDataParallel averages the gradients; "
            "apex was told to sum them",
        },
        torch_args=frozenset({"module"}),
    ),
}

_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


ALIASES = "apex_aliases"  # local name -> what it names under apex, per file
# ``from apex.parallel import DistributedDataParallel as ApexDDP``: the fixers choose by
# apex's own class name, which an alias hides.
register_aliases(ALIASES, ("apex",), "TPK007", "TPK008", "TPK009")


def _class_name(node: cst.CSTNode, ctx: FixContext) -> str:
    return last_name(
        node, ctx, ALIASES, lambda: NotApplicable("the apex class is not named plainly here")
    )


@dataclass(frozen=True)
class SpreadKeys:
    """The keys a ``**name`` argument can carry: ``always`` (the dict's literal keys, never
    popped) and ``maybe`` (set, defaulted or popped on some path)."""

    always: frozenset[str]
    maybe: frozenset[str]


class _DictBuilding(cst.CSTVisitor):
    """How one function builds the dict ``name``: its literal keys, the keys set or popped
    later, and whether it is used any other way (then its keys are unknown)."""

    EDITS: ClassVar[dict[str, str]] = {"setdefault": "maybe", "pop": "popped"}

    def __init__(self, name: str) -> None:
        self.name = name
        self.literal: set[str] | None = None
        self.maybe: set[str] = set()
        self.popped: set[str] = set()
        self.unknown: str | None = None
        self._explained: set[int] = set()  # the Name nodes each use above accounts for

    def _key(self, node: cst.BaseExpression) -> str | None:
        return node.evaluated_value if isinstance(node, cst.SimpleString) else None

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Name) and t.value == self.name:
                self._explained.add(id(t))
                if self.literal is not None:
                    self.unknown = f"{self.name} is assigned more than once"
                self.literal = self._literal_keys(node.value)
            else:
                self._item(t, self.maybe, f"{self.name}[...] is set")

    def _item(self, node: cst.BaseExpression, keys: set[str], what: str) -> None:
        """``name["key"]`` (set or deleted): its key noted in ``keys``."""
        if not (
            isinstance(node, cst.Subscript)
            and isinstance(node.value, cst.Name)
            and node.value.value == self.name
        ):
            return
        self._explained.add(id(node.value))
        index = node.slice[0].slice if len(node.slice) == 1 else None
        key = self._key(index.value) if isinstance(index, cst.Index) else None
        if key is None:
            self.unknown = f"{what} with a key not written out"
        else:
            keys.add(key)

    def _literal_keys(self, value: cst.BaseExpression) -> set[str] | None:
        if isinstance(value, cst.Dict):
            keys = [
                self._key(e.key) if isinstance(e, cst.DictElement) else None for e in value.elements
            ]
        elif isinstance(value, cst.Call) and dotted(value.func) == "dict" and value.args:
            keys = [a.keyword.value if a.keyword and not a.star else None for a in value.args]
        elif isinstance(value, cst.Call) and dotted(value.func) == "dict":
            keys = []
        else:
            keys = [None]
        if None in keys:
            self.unknown = f"{self.name} is not built from a dict with its keys written out"
            return set()
        return set(keys)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == self.name
        ):
            self._explained.add(id(func.value))
            kind = self.EDITS.get(func.attr.value)
            key = self._key(node.args[0].value) if node.args else None
            if kind is None or key is None:
                self.unknown = f"{self.name}.{func.attr.value}(...) changes keys not written out"
            else:
                getattr(self, kind).add(key)

    def visit_Del(self, node: cst.Del) -> None:
        self._item(node.target, self.popped, f"del {self.name}[...]")

    def visit_Arg(self, node: cst.Arg) -> None:
        value = node.value
        if node.star == "**" and isinstance(value, cst.Name) and value.value == self.name:
            self._explained.add(id(value))  # spread into a call: read, not changed

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self._explained:
            self.unknown = self.unknown or f"{self.name} is passed on or changed another way"


def _spread_keys(call: cst.Call, ctx: FixContext) -> SpreadKeys:
    """The keys of ``call``'s one ``**name``, from how its function (or module) builds it."""
    spread = [a for a in call.args if a.star]
    if len(spread) != 1 or spread[0].star != "**" or not isinstance(spread[0].value, cst.Name):
        raise NotApplicable(
            "arguments passed with * or ** other than one **dict: their names are not known"
        )
    name = spread[0].value.value
    scope: cst.CSTNode | None = ctx.original
    while scope is not None and not isinstance(scope, cst.FunctionDef | cst.Module):
        scope = ctx.parent(scope)
    if scope is None:
        raise NotApplicable(f"**{name}: where {name} is built is not known")
    building = _DictBuilding(name)
    scope.visit(building)
    if building.unknown or building.literal is None:
        raise NotApplicable(
            f"**{name}: its keys are not known ({building.unknown or f'{name} is not built here'})"
        )
    always = frozenset(building.literal - building.popped)
    return SpreadKeys(always, frozenset(building.literal | building.maybe) - always)


def _named_args(call: cst.Call, port: Port) -> list[tuple[str | None, cst.Arg]]:
    """Each argument with the parameter it binds (None for the ones kept positional, and
    for a ``**dict`` spread, whose keys ``_port_call`` checks)."""
    named: list[tuple[str | None, cst.Arg]] = []
    for i, arg in enumerate(call.args):
        if arg.star == "**":
            named.append((None, arg))
            continue
        if arg.star:
            raise NotApplicable(f"arguments passed with {arg.star}: their names are not known")
        if arg.keyword is not None:
            named.append((arg.keyword.value, arg))
        elif i >= len(port.signature):
            raise NotApplicable("more positional arguments than apex's signature has")
        else:
            named.append((None if i < port.positional else port.signature[i], arg))
    return named


def _keyword(name: str, arg: cst.Arg) -> cst.Arg:
    return arg.with_changes(
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )


def _spread_given(call: cst.Call, port: Port, torch: str, ctx: FixContext) -> set[str]:
    """The parameters a ``**dict`` argument always binds; refused when one it may bind has
    no torch counterpart (a key apex does not know fails in both, so it may pass)."""
    if not any(a.star for a in call.args):
        return set()
    keys = _spread_keys(call, ctx)
    for key in sorted(keys.always | keys.maybe):
        if key in port.signature and key not in port.torch_args:
            raise NotApplicable(
                f"the **dict may carry {key}=, which {torch} has no counterpart for"
            )
    for key in sorted(keys.maybe & set(port.explicit)):
        raise NotApplicable(
            f"the **dict carries {key}= on some paths only, and apex's default for it differs "
            f"from {torch}'s: make it explicit in the dict"
        )
    return set(keys.always)


def _port_call(call: cst.Call, port: Port, torch: str, ctx: FixContext) -> cst.Call:
    args: list[cst.Arg] = []
    given: set[str] = _spread_given(call, port, torch, ctx)
    for i, (name, arg) in enumerate(_named_args(call, port)):
        if name is None:
            if not arg.star:
                given.add(port.signature[i])
            args.append(arg)
            continue
        given.add(name)
        if name in port.torch_args:
            args.append(arg if arg.keyword is not None else _keyword(name, arg))
            continue
        value = code_of(arg.value)
        allowed = port.neutral.get(name, ())
        if allowed != ANY and value not in allowed:
            why = port.refused.get(name, f"{name}= has no counterpart in {torch}")
            raise NotApplicable(f"{name}={value}: {why}")
    if args and len(args) < len(call.args):  # an argument dropped: the last one closes the call
        last = call.args[-1]
        closing = args[-1].with_changes(
            comma=last.comma, whitespace_after_arg=last.whitespace_after_arg
        )
        args = [
            a if a.comma is not cst.MaybeSentinel.DEFAULT else a.with_changes(comma=_COMMA)
            for a in args[:-1]
        ] + [closing]
    ported = call.with_changes(func=ctx.expr(torch), args=args)
    for name, value in port.explicit.items():
        if name not in given:
            ported = set_kwarg(ported, name, ctx.expr(value))
    return ported


@register("TPK007")
def apex_optimizer(node: cst.CSTNode, ctx: FixContext):
    name = _class_name(node, ctx)
    if name in NO_TORCH_OPTIMIZER:
        raise NotApplicable(
            f"torch.optim has no {NO_TORCH_OPTIMIZER[name]}: keep an implementation of it in "
            "PyTorch, or change the optimizer on purpose (training will differ)"
        )
    port = OPTIMIZERS.get(name)
    if port is None:
        raise NotApplicable(f"apex.optimizers.{name} has no torch counterpart in the catalogue")
    if not isinstance(node, cst.Call):
        raise NotApplicable(
            f"{name} is referenced, not called: its defaults differ from torch's, so each "
            "call needs its own port"
        )
    if name == "FusedAdam":
        mode = next((a for n, a in _named_args(node, port) if n == "adam_w_mode"), None)
        if mode is not None and code_of(mode.value) == "False":
            port = dataclasses.replace(port, torch=ADAM_L2, explicit={})
        elif mode is not None and code_of(mode.value) != "True":
            raise NotApplicable(_ADAM_REFUSED["adam_w_mode"])
    return _port_call(node, port, port.torch, ctx)


@register("TPK008")
def apex_norm(node: cst.CSTNode, ctx: FixContext):
    name = _class_name(node, ctx)
    port = NORMS.get(name)
    if port is None:
        raise NotApplicable(f"apex.normalization.{name} has no torch counterpart in the catalogue")
    if isinstance(node, cst.Call):
        return _port_call(node, port, port.torch, ctx)
    if port.explicit:
        raise NotApplicable(
            f"{name} is referenced, not called, and {port.torch}'s defaults differ "
            f"({', '.join(port.explicit)}): each call needs its own port"
        )
    return ctx.expr(port.torch)


SYNC_BN = (
    "synchronized batch norm is TPN004's question on every target (plain BatchNorm, or "
    "statistics all-reduced by hand): torch.nn.SyncBatchNorm would only move it there"
)


@register("TPK009")
def apex_parallel(node: cst.CSTNode, ctx: FixContext):
    name = _class_name(node, ctx)
    if name in ("convert_syncbn_model", "SyncBatchNorm"):
        raise NotApplicable(SYNC_BN)
    port = PARALLEL.get(name)
    if port is None:
        raise NotApplicable(f"apex.parallel.{name} has no torch counterpart in the catalogue")
    if not isinstance(node, cst.Call):
        raise NotApplicable(f"{name} is referenced, not called: each call needs its own port")
    return _port_call(node, port, port.torch, ctx)
