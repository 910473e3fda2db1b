"""The ``shim`` baseline: run unmodified CUDA code on the target by patching torch at
run time, the way vendor GPU-migration toolkits do (e.g. ``transfer_to_npu``).

Imported (``RunSpec.preload``) inside the sandboxed process after the emulated
device is active. No source is edited: ``.cuda()`` and ``"cuda"`` device
arguments are redirected to the device, ``torch.cuda.*`` device, memory, RNG,
sync and AMP calls to their ``torch.accelerator``/``torch.amp`` counterparts, and
the NCCL backend to the device's. What it cannot redirect fails as it would.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
from torchport.sandbox import patching

DEVICE = torch._C._get_privateuse1_backend_name()
_CUDA = re.compile(r"^cuda(?=$|:)")
_FACTORIES = (
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
)


def _device(value: Any) -> Any:
    if isinstance(value, str):
        return _CUDA.sub(DEVICE, value)
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device(DEVICE, value.index)
    if isinstance(value, int) and not isinstance(value, bool):
        return torch.device(DEVICE, value)
    return value


def _redirect(fn: Any, positional: int | None = None) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = _device(kwargs["device"])
        if positional is not None and len(args) > positional:
            args = (*args[:positional], _device(args[positional]), *args[positional + 1 :])
        return fn(*args, **kwargs)

    return wrapper


def _to_device(self: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
    return self.to(_device(0 if device is None else device), *args, **kwargs)


def _patch(owner: Any, name: str, value: Any) -> None:
    # For the whole run, as the vendor toolkits do; listed with the sandbox's own patches.
    patching.patch(owner, name, value, by="evals.transfer")


def install() -> None:
    for name in _FACTORIES:
        _patch(torch, name, _redirect(getattr(torch, name)))
    for cls in (torch.Tensor, torch.nn.Module):
        _patch(cls, "to", _redirect(cls.to, positional=1))
        _patch(cls, "cuda", _to_device)

    cuda, acc = torch.cuda, torch.accelerator
    seed = getattr(torch, DEVICE).manual_seed_all
    # (torch.manual_seed itself calls torch.cuda.manual_seed_all: no torch.manual_seed here)
    answers: dict[str, Any] = {
        "is_available": acc.is_available,
        "device_count": acc.device_count,
        "current_device": acc.current_device_index,
        "set_device": lambda device: acc.set_device_index(_device(device)),
        "synchronize": lambda device=None: acc.synchronize(),
        "get_device_name": lambda device=None: f"emulated {DEVICE}",
        "manual_seed": seed,
        "manual_seed_all": seed,
        "empty_cache": acc.memory.empty_cache,
        "memory_allocated": lambda device=None: acc.memory.memory_allocated(),
        "max_memory_allocated": lambda device=None: acc.memory.max_memory_allocated(),
        "reset_peak_memory_stats": lambda device=None: acc.memory.reset_peak_memory_stats(),
    }
    for name, answer in answers.items():
        _patch(cuda, name, answer)
    _patch(cuda.amp, "autocast", functools.partial(torch.autocast, DEVICE, dtype=torch.bfloat16))
    _patch(cuda.amp, "GradScaler", functools.partial(torch.amp.GradScaler, DEVICE))

    class autocast(torch.autocast):  # the real one: the patch below comes after
        def __init__(self, device_type: str, *args: Any, **kwargs: Any) -> None:
            super().__init__(_device(device_type), *args, **kwargs)

    _patch(torch, "autocast", autocast)
    _patch(torch.amp, "autocast", autocast)
    original_scaler = torch.amp.GradScaler.__init__

    def scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        original_scaler(self, _device(device), *args, **kwargs)

    _patch(torch.amp.GradScaler, "__init__", scaler_init)
    _patch(torch, "load", _redirect_map_location(torch.load))

    import torch.distributed as dist

    original_init = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend in ("nccl", "cuda:nccl"):
            backend = DEVICE
        return original_init(backend, *args, **kwargs)

    _patch(dist, "init_process_group", init_process_group)


def _redirect_map_location(load: Any) -> Any:
    @functools.wraps(load)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "map_location" in kwargs:
            kwargs["map_location"] = _device(kwargs["map_location"])
        return load(*args, **kwargs)

    return wrapper


install()
