"""Codemods for bitsandbytes' optimizers (TPK017): each becomes the ``torch.optim``
optimizer that computes the same update in full precision.

bitsandbytes keeps an optimizer's state in 8 bits (blockwise-quantized moments, 2 bytes a
parameter for Adam instead of 8) for tensors of at least ``min_8bit_size`` elements, and
in fp32 below that; its paged variants page that state to host memory. On the target the
port keeps fp32 state: the same update up to the 8-bit rounding of the moments, at 4x the
optimizer memory. The tables follow what bitsandbytes 0.50.2 computes, measured on its CPU
backend against torch (``tests/test_bnb_ports.py``), which is not always what its
signatures suggest:

- ``Adam`` with ``weight_decay`` decays decoupled, as ``torch.optim.AdamW`` does: the port
  is ``Adam`` only where the decay is 0;
- ``amsgrad``, ``SGD``'s ``dampening`` and ``nesterov`` are accepted and ignored, so they
  are dropped whatever their value (keeping them would change the update);
- ``RMSprop`` with momentum computes something else than torch's: refused.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from .base import REMOVE_STATEMENT, FixContext, Fixed, NotApplicable, code_of, dotted, fixer
from .library_port import ANY, Port, named_args, optimizer_port, port_call, register_aliases

# Arguments every bitsandbytes optimizer takes that only say how its state is stored.
_STORAGE = {
    "optim_bits": ANY,  # 8 or 32-bit state: the port keeps fp32 either way
    "min_8bit_size": ANY,
    "is_paged": ANY,  # paged to host memory: where the state lives, not what it is
    "block_wise": ("True", "False"),  # older releases: how the 8-bit state is quantized
    "percentile_clipping": ("100",),  # 100: no clipping (older releases' default)
    "args": ("None",),
    "max_unorm": ("0.0", "0"),
    "skip_zeros": ("False",),
}
_STORAGE_SIGNATURE = ("optim_bits", "args", "min_8bit_size")
_STORAGE_REFUSED = {
    "percentile_clipping": "bitsandbytes clips each gradient to a percentile of its recent "
    "norms; torch.optim has no such clipping",
    "args": "a bitsandbytes config object sets the optimizer's hyper-parameters",
    "max_unorm": "bitsandbytes limits the update's norm; torch.optim does not",
    "skip_zeros": "bitsandbytes skips zero gradients; torch.optim does not",
}

_ADAM = Port(
    "torch.optim.Adam",
    ("params", "lr", "betas", "eps", "weight_decay", "amsgrad", *_STORAGE_SIGNATURE),
    2,
    neutral={**_STORAGE, "amsgrad": ANY},  # accepted and ignored by bitsandbytes
    refused=_STORAGE_REFUSED,
    torch_args=frozenset({"params", "lr", "betas", "eps", "weight_decay"}),
)
# bitsandbytes' AdamW defaults weight_decay to 0.01, as torch's does
_ADAMW = dataclasses.replace(_ADAM, torch="torch.optim.AdamW")
# bitsandbytes' Adam with a decay that may not be 0: decoupled, and 0 where left out
_ADAM_DECOUPLED = dataclasses.replace(_ADAMW, explicit={"weight_decay": "0.0"})
_SGD = Port(
    "torch.optim.SGD",
    ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", *_STORAGE_SIGNATURE),
    2,
    neutral={**_STORAGE, "dampening": ANY, "nesterov": ANY},  # both ignored by bitsandbytes
    refused=_STORAGE_REFUSED,
    torch_args=frozenset({"params", "lr", "momentum", "weight_decay"}),
)
_ADAGRAD = Port(
    "torch.optim.Adagrad",
    (
        "params",
        "lr",
        "lr_decay",
        "weight_decay",
        "initial_accumulator_value",
        "eps",
        *_STORAGE_SIGNATURE,
    ),
    2,
    neutral=_STORAGE,
    refused=_STORAGE_REFUSED,
    torch_args=frozenset(
        {"params", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"}
    ),
)
_RMSPROP = Port(
    "torch.optim.RMSprop",
    ("params", "lr", "alpha", "eps", "weight_decay", "momentum", "centered", *_STORAGE_SIGNATURE),
    2,
    neutral={**_STORAGE, "momentum": ("0", "0.0")},
    refused={
        **_STORAGE_REFUSED,
        "momentum": "bitsandbytes' RMSprop with momentum computes another update than "
        "torch's (measured on bitsandbytes 0.50.2)",
    },
    torch_args=frozenset({"params", "lr", "alpha", "eps", "weight_decay", "centered"}),
)


def _variants(port: Port, *names: str) -> dict[str, Port]:
    """The class and its 8-bit, 32-bit and paged variants: one update, other storage."""
    return {
        f"{paged}{name}{bits}": port
        for name in names
        for paged in ("", "Paged")
        for bits in ("", "8bit", "32bit")
    }


OPTIMIZERS: dict[str, Port] = {
    **_variants(_ADAM, "Adam"),
    **_variants(_ADAMW, "AdamW"),
    **_variants(_SGD, "SGD"),
    **_variants(_ADAGRAD, "Adagrad"),
    **_variants(_RMSPROP, "RMSprop"),
}

NO_TORCH_OPTIMIZER = {
    **dict.fromkeys(_variants(_ADAM, "Lion"), "Lion"),
    **dict.fromkeys(_variants(_ADAM, "LAMB"), "LAMB"),
    **dict.fromkeys(_variants(_ADAM, "LARS"), "LARS"),
    **dict.fromkeys(_variants(_ADAM, "AdEMAMix"), "AdEMAMix"),
}

ZERO = ("0", "0.0", "0.", "0e0")

register_aliases("bitsandbytes", "TPK017")


def _adam_port(call: cst.Call) -> Port:
    """``Adam`` decays decoupled in bitsandbytes: ``AdamW`` unless the decay is evidently 0
    (left out, or a literal 0; a ``**dict`` may carry any)."""
    if any(a.star for a in call.args):
        return _ADAM_DECOUPLED
    decay = next((a for n, a in named_args(call, _ADAM) if n == "weight_decay"), None)
    if decay is None or code_of(decay.value) in ZERO:
        return _ADAM
    return _ADAM_DECOUPLED


def _optim_manager(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """``GlobalOptimManager.get_instance().register_parameters(...)`` / ``.override_config``
    choose 8- or 32-bit state per parameter: with fp32 state everywhere they say nothing."""
    statement: cst.CSTNode | None = node
    while statement is not None and not isinstance(statement, cst.SimpleStatementLine):
        statement = ctx.parent(statement)
    if (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
    ):
        return REMOVE_STATEMENT
    raise NotApplicable(
        "GlobalOptimManager is kept in a variable or passed on: remove its per-parameter "
        "8-bit settings by hand (the ported optimizer keeps every state in fp32)"
    )


@fixer("TPK017")
def bnb_optimizer(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    func = node.func if isinstance(node, cst.Call) else node
    if "GlobalOptimManager" in (dotted(func) or "").split("."):
        return _optim_manager(ctx.original, ctx)
    _, port = optimizer_port(
        node,
        ctx,
        "bitsandbytes",
        OPTIMIZERS,
        NO_TORCH_OPTIMIZER,
        "each call needs its own port (its weight decay decides between Adam and AdamW, and "
        "its storage arguments are dropped)",
    )
    assert isinstance(node, cst.Call)
    if port is _ADAM:
        port = _adam_port(node)
    return port_call(node, port, port.torch, ctx)
