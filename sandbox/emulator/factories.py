"""PrivateUse1 kernels for factory functions (``torch.zeros(..., device="tpu")``).

Factories have no tensor argument, so ``__torch_dispatch__`` never sees them:
the dispatcher routes them by ``device=`` to the PrivateUse1 key. torch 2.13's
generic Python fallback for that key (``Library("_", "IMPL").fallback``) hits an
internal assert, so each factory gets its own kernel, all built from one
template: run the op on the CPU, wrap the result on the requested device.
Ops that torch composes from ``empty`` + an in-place fill (``zeros``, ``randn``,
``full``, ``*_like``) would work through ``empty`` alone; ``arange`` and
``linspace`` resize an ``out=`` tensor, which a wrapper cannot follow, so they and
the other common factories are registered directly.
"""

from __future__ import annotations

from typing import Any

import torch

from . import generator, state
from .counters import record_op, record_transfer
from .tensor import EmulatedTensor, to_device, value_of

# Overloads that take a device= keyword and no tensor.
FACTORY_OPS: tuple[str, ...] = (
    "empty.memory_format",
    "empty_strided",
    "zeros",
    "ones",
    "full",
    "rand",
    "rand.generator",
    "randn",
    "randn.generator",
    "randint",
    "randint.generator",
    "randint.low",
    "randint.low_generator",
    "randperm",
    "randperm.generator",
    "normal.float_float",
    "arange",
    "arange.start",
    "arange.start_step",
    "linspace",
    "logspace",
    "eye",
    "eye.m",
    "scalar_tensor",
)

_libs: list[torch.library.Library] = []


def _make_kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        index = state.check_index(torch.device(kwargs.get("device") or state.name).index)
        kwargs["device"] = torch.device("cpu")
        kwargs.pop("pin_memory", None)
        if kwargs.get("generator") is not None:
            kwargs["generator"] = generator.for_device_op(kwargs["generator"])
        out = op(*args, **kwargs)
        record_op(str(op.overloadpacket.__name__), out.dtype == torch.float64)
        return to_device(out, index)

    return kernel


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``torch.tensor(data, device=...)`` copies with the Python key excluded.

    That copy lands on PrivateUse1 rather than ``__torch_dispatch__``; it is a
    host-to-device transfer into the wrapper's CPU tensor.
    """
    assert isinstance(dst, EmulatedTensor)  # registered for the device: its tensors are these
    dst._elem.copy_(value_of(src) if isinstance(src, EmulatedTensor) else src)
    if not isinstance(src, EmulatedTensor):
        record_transfer("h2d", src.numel() * src.element_size())
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    return _copy_from(src, dst)


def register() -> None:
    """Register a CPU-backed PrivateUse1 kernel for each op in FACTORY_OPS."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    for qualname in FACTORY_OPS:
        name, _, overload = qualname.partition(".")
        op = getattr(getattr(torch.ops.aten, name), overload or "default")
        lib.impl(qualname, _make_kernel(op), "PrivateUse1")
    _libs.append(lib)  # the registrations live as long as the Library object
