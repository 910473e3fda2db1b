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

import libcst as cst

from .base import FixContext, Fixed, NotApplicable, code_of, fixer
from .library_port import (
    ANY,
    Port,
    class_name,
    named_args,
    optimizer_port,
    port_call,
    register_aliases,
)

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
# memory_efficient recomputes in backward: the same values either way
_NORM_NEUTRAL: dict[str, tuple[str, ...]] = {"memory_efficient": ("True", "False")}
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

register_aliases("apex", "TPK007", "TPK008", "TPK009")


@fixer("TPK007")
def apex_optimizer(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name, port = optimizer_port(
        node,
        ctx,
        "apex",
        OPTIMIZERS,
        NO_TORCH_OPTIMIZER,
        "its defaults differ from torch's, so each call needs its own port",
    )
    assert isinstance(node, cst.Call)
    if name == "FusedAdam":
        mode = next((a for n, a in named_args(node, port) if n == "adam_w_mode"), None)
        if mode is not None and code_of(mode.value) == "False":
            port = dataclasses.replace(port, torch=ADAM_L2, explicit={})
        elif mode is not None and code_of(mode.value) != "True":
            raise NotApplicable(_ADAM_REFUSED["adam_w_mode"])
    return port_call(node, port, port.torch, ctx)


@fixer("TPK008")
def apex_norm(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = class_name(node, ctx, "apex")
    port = NORMS.get(name)
    if port is None:
        raise NotApplicable(f"apex.normalization.{name} has no torch counterpart in the catalogue")
    if isinstance(node, cst.Call):
        return port_call(node, port, port.torch, ctx)
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


@fixer("TPK009")
def apex_parallel(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    name = class_name(node, ctx, "apex")
    if name in ("convert_syncbn_model", "SyncBatchNorm"):
        raise NotApplicable(SYNC_BN)
    port = PARALLEL.get(name)
    if port is None:
        raise NotApplicable(f"apex.parallel.{name} has no torch counterpart in the catalogue")
    if not isinstance(node, cst.Call):
        raise NotApplicable(f"{name} is referenced, not called: each call needs its own port")
    return port_call(node, port, port.torch, ctx)
