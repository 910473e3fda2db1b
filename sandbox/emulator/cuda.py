"""Record every attempt to use CUDA on the emulated device, and let it fail as it would.

A program ported to ``tpu`` / ``neuron`` runs there on a torch without CUDA, so a CUDA
call left behind raises ``Torch not compiled with CUDA enabled`` (``torch.randn(...,
device="cuda")``, ``.cuda()``, ``torch.cuda.synchronize()``), or is silently accepted
(``torch.cuda.manual_seed``, ``torch.cuda.is_available() == False``: the program then
quietly takes its CPU branch). The emulator keeps both behaviours of the CPU build and
records each call, with the user's file and line, in ``counters()["cuda_call_sites"]``.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
import torch.amp
import torch.cuda

from .. import patching
from .counters import is_internal, record_cuda

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_local = threading.local()
_installed = False

# torch.cuda classes whose construction is a CUDA use (the dummy types of a CPU build).
_CLASSES = ("Event", "Stream", "ExternalStream", "device", "device_of", "StreamContext")


def _nested() -> bool:
    return getattr(_local, "depth", 0) > 0


def _record_direct(api: str, depth: int = 2) -> bool:
    """Record ``api`` if the frame ``depth`` levels up is the program's (not torch's)."""
    if _nested() or is_internal(sys._getframe(depth).f_code.co_filename):
        return False
    record_cuda(api)
    return True


def _wrap_function(api: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        recorded = _record_direct(api)
        if recorded:
            _local.depth = getattr(_local, "depth", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            if recorded:
                _local.depth -= 1

    wrapper.__dict__["__torchport_original__"] = fn
    return wrapper


def _wrap_constructor(api: str, cls: type) -> None:
    """Record constructing ``cls`` (in ``__new__`` if it has one: dummy types raise there)."""
    name = "__new__" if cls.__new__ is not object.__new__ else "__init__"
    real = getattr(cls, name)

    @functools.wraps(real)
    def constructor(*args: Any, **kwargs: Any) -> Any:
        recorded = _record_direct(api)
        if recorded:
            _local.depth = getattr(_local, "depth", 0) + 1
        try:
            return real(*args, **kwargs)
        finally:
            if recorded:
                _local.depth -= 1

    wrapper = staticmethod(constructor) if name == "__new__" else constructor
    patching.patch(cls, name, wrapper, by="emulator.cuda")


def _lazy_init_api() -> str:
    """Name what asked for the CUDA device: the torch function the user called, if any."""
    frame: FrameType | None = sys._getframe(2)  # the caller of _lazy_init
    api = "device='cuda'"
    while frame is not None and is_internal(frame.f_code.co_filename):
        code = frame.f_code
        if code.co_filename.startswith(_TORCH_DIR):  # not the emulator's own wrappers
            api = getattr(code, "co_qualname", code.co_name)
        frame = frame.f_back
    return api if api == "device='cuda'" else f"{api} (device='cuda')"


def _wrap_lazy_init(real: Callable[[], None]) -> Callable[[], None]:
    """``torch.cuda._lazy_init``: where every use of a ``cuda`` device ends up.

    torch's C++ calls it (looked up by name each time) before the first CUDA tensor
    is made, so ``device="cuda"`` factories, ``.to("cuda")``, ``.cuda()`` and
    ``Module.cuda()`` all pass here; on a CPU build it raises ``AssertionError:
    Torch not compiled with CUDA enabled``.
    """

    @functools.wraps(real)
    def _lazy_init() -> None:
        if not _nested():
            record_cuda(_lazy_init_api())
        real()

    return _lazy_init


def _wrap_amp(cls: type, device_arg: str, default: str | None) -> None:
    """Record ``torch.autocast("cuda")`` / ``GradScaler("cuda")`` (torch warns and disables)."""
    init = cls.__init__  # type: ignore[misc]  # the class's own constructor, wrapped below
    params = list(inspect.signature(init).parameters)
    position = params.index(device_arg) - 1  # without self

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        device = args[position] if len(args) > position else kwargs.get(device_arg, default)
        if isinstance(device, str) and device.split(":")[0] == "cuda" and not _nested():
            record_cuda(f"{cls.__name__}({device!r})")
        init(self, *args, **kwargs)

    patching.patch(cls, "__init__", __init__, by="emulator.cuda")


def record_load_location(location: str) -> None:
    """``torch.load`` met a CUDA storage (saved on CUDA or ``map_location="cuda"``)."""
    if location.split(":")[0] == "cuda":
        record_cuda(f"torch.load(location={location!r})")


def install() -> None:
    """Wrap ``torch.cuda``'s functions and classes, ``_lazy_init`` and the amp entry points."""
    global _installed
    if _installed:
        return
    _installed = True
    patching.patch(
        torch.cuda, "_lazy_init", _wrap_lazy_init(torch.cuda._lazy_init), by="emulator.cuda"
    )
    for name in dir(torch.cuda):
        if name.startswith("_"):
            continue
        value = getattr(torch.cuda, name)
        if inspect.isfunction(value) and value.__module__.startswith("torch.cuda"):
            wrapped = _wrap_function(f"torch.cuda.{name}", value)
            patching.patch(torch.cuda, name, wrapped, by="emulator.cuda")
    for name in _CLASSES:
        cls = getattr(torch.cuda, name, None)
        if isinstance(cls, type) and cls.__module__.startswith("torch.cuda"):
            _wrap_constructor(f"torch.cuda.{name}", cls)
    _wrap_amp(torch.amp.autocast_mode.autocast, "device_type", None)
    _wrap_amp(torch.amp.GradScaler, "device", "cuda")
