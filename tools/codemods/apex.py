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

import libcst as cst

from .base import FixContext, NotApplicable, code_of, dotted, prescan, set_kwarg
from .base import fixer as register


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


class _ApexImports(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None and not node.relative else None
        if (
            module is None
            or module.split(".")[0] != "apex"
            or isinstance(node.names, cst.ImportStar)
        ):
            return
        for alias in node.names:
            name = dotted(alias.name)
            local = alias.asname.name.value if alias.asname else name
            if name is not None and isinstance(local, str):
                self.names[local] = f"{module}.{name}"


def _aliases(module: cst.Module, lines: list[int], target: str) -> dict:
    """``from apex.parallel import DistributedDataParallel as ApexDDP``: the fixers choose by
    apex's own class name, which an alias hides."""
    found = _ApexImports()
    module.visit(found)
    return {ALIASES: found.names} if found.names else {}


for _code in ("TPK007", "TPK008", "TPK009"):
    prescan(_code)(_aliases)


def _class_name(node: cst.CSTNode, ctx: FixContext) -> str:
    func = node.func if isinstance(node, cst.Call) else node
    name = dotted(func) if isinstance(func, cst.BaseExpression) else None
    if name is None:
        raise NotApplicable("the apex class is not named plainly here")
    first, _, rest = name.partition(".")
    qualified = ctx.state.get(ALIASES, {}).get(first, first) + (f".{rest}" if rest else "")
    return qualified.rsplit(".", 1)[-1]


def _named_args(call: cst.Call, port: Port) -> list[tuple[str | None, cst.Arg]]:
    """Each argument with the parameter it binds (None for the ones kept positional)."""
    named: list[tuple[str | None, cst.Arg]] = []
    for i, arg in enumerate(call.args):
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


def _port_call(call: cst.Call, port: Port, torch: str, ctx: FixContext) -> cst.Call:
    args: list[cst.Arg] = []
    given: set[str] = set()
    for i, (name, arg) in enumerate(_named_args(call, port)):
        if name is None:
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
