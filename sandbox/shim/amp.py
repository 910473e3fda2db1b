"""CUDA mixed precision turned off: the reference run computes in fp32.

`torch.autocast("cuda")` and friends become disabled CPU autocast contexts, and CUDA
GradScalers become disabled scalers (`scale` returns the loss, `step` steps, `update` /
`unscale_` do nothing, `get_scale` is 1.0). Both are built directly with `enabled=False`
on the CPU, so torch emits none of its "CUDA is not available, disabling" warnings, and
the classes stay subclasses of torch's (and the torch.cuda.amp ones of the torch.amp ones),
so `isinstance` checks keep working.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import torch.amp
import torch.amp.autocast_mode
import torch.amp.grad_scaler
import torch.cuda.amp

from .. import patching
from .devices import is_cuda_device
from .recording import record

_RealAutocast = torch.amp.autocast_mode.autocast
_RealGradScaler = torch.amp.grad_scaler.GradScaler


class autocast(_RealAutocast):
    """`torch.autocast` whose CUDA form is a disabled (fp32) context."""

    def __init__(
        self,
        device_type: str,
        dtype: torch.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if is_cuda_device(device_type):
            record(f"torch.autocast({device_type!r})")
            device_type, dtype, enabled = "cpu", None, False
        super().__init__(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class cuda_autocast(autocast):
    """`torch.cuda.amp.autocast(...)`: always a disabled context (it is CUDA by definition)."""

    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype = torch.float16,
        cache_enabled: bool = True,
    ) -> None:
        record("torch.cuda.amp.autocast")
        _RealAutocast.__init__(self, "cpu", enabled=False)


class GradScaler(_RealGradScaler):
    """`torch.amp.GradScaler`, disabled when made for "cuda"."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if is_cuda_device(device):
            record(f"torch.amp.GradScaler({device!r})")
            device, enabled = "cpu", False
        super().__init__(
            device, init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )


class CudaGradScaler(GradScaler):
    """`torch.cuda.amp.GradScaler(...)`: always a disabled scaler."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        record("torch.cuda.amp.GradScaler")
        _RealGradScaler.__init__(
            self, "cpu", init_scale, growth_factor, backoff_factor, growth_interval, False
        )


def install() -> None:
    """Point every public autocast / GradScaler name at the fp32 versions above."""
    targets: list[tuple[Any, str, Any]] = [
        (torch, "autocast", autocast),
        (torch.amp, "autocast", autocast),
        (torch.amp.autocast_mode, "autocast", autocast),
        (torch.amp, "GradScaler", GradScaler),
        (torch.amp.grad_scaler, "GradScaler", GradScaler),
        (torch.cuda.amp, "autocast", cuda_autocast),
        (torch.cuda.amp, "GradScaler", CudaGradScaler),
    ]
    for owner, name, value in targets:
        patching.patch(owner, name, value, by="shim.amp")
    for module, name in (
        ("torch.cuda.amp.autocast_mode", "autocast"),
        ("torch.cuda.amp.grad_scaler", "GradScaler"),
    ):
        if module in sys.modules:
            patching.patch(sys.modules[module], name, getattr(torch.cuda.amp, name), by="shim.amp")
