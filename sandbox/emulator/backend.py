"""Register the emulated device with torch as a Python PrivateUse1 backend.

Uses ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``
(experimental in torch 2.13) for the device name, ``Tensor.<name>()`` /
``is_<name>``, ``Module.<name>()``, hooks and guard; then supplies what that
helper cannot: a device module (``torch.<name>``) that knows the device count,
and ``torch.accelerator`` index functions, because the Python device guard is
fixed at one device, index 0, with a no-op ``setDevice``.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils import backend_registration

from . import counters, state
from .tensor import EmulatedTensor

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OUR_DIR = os.path.dirname(__file__) + os.sep

# torch.tpu.X -> the torch.accelerator API that TorchTPU's error points to.
_LEGACY = {
    "synchronize": "torch.accelerator.synchronize",
    "is_available": "torch.accelerator.is_available",
    "device_count": "torch.accelerator.device_count",
    "current_device": "torch.accelerator.current_device_index",
    "set_device": "torch.accelerator.set_device_index",
}


def _device_index(device: Any) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != state.name:
        raise ValueError(f"expected a {state.name} device, got {device}")
    return device.index


def _legacy_guarded(fn: Callable[..., Any], public: str) -> Callable[..., Any]:
    """TorchTPU (torch >= 2.11) refuses ``torch.tpu.<device API>`` from user code.

    torch itself still calls them (``torch.accelerator.device_count`` goes
    through the device module), so only callers outside torch are refused, and
    ``TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS=1`` lifts the ban as it does there.
    """

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        caller = sys._getframe(1).f_code.co_filename
        allowed = os.environ.get("TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS") == "1"
        if not allowed and not caller.startswith((_TORCH_DIR, _OUR_DIR)):
            raise RuntimeError(
                f"torch.tpu.{fn.__name__} is internal to TorchTPU and not a public "
                f"device API. Use {public} instead "
                "(or set TORCH_TPU_ALLOW_LEGACY_DEVICE_APIS=1)."
            )
        return fn(*args, **kwargs)

    return guarded


def _synchronize(device: Any = None) -> None:
    # The emulator runs eagerly on the CPU: nothing is ever in flight.
    state.check_index(_device_index(device))


@contextmanager
def _device_ctx(device: Any) -> Iterator[None]:
    prev = state.current_index()
    index = _device_index(device)
    if index is not None:
        state.set_current_index(index)
    try:
        yield
    finally:
        state.set_current_index(prev)


def make_device_module(name: str) -> types.ModuleType:
    """Build ``torch.<name>``: device management plus seeding, all CPU-backed."""
    mod = types.ModuleType(f"torch.{name}", f"Emulated {name} device module (torchport).")
    funcs: dict[str, Callable[..., Any]] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "device_count": lambda: state.count,
        "current_device": state.current_index,
        "set_device": lambda device: state.set_current_index(_device_index(device) or 0),
        "synchronize": _synchronize,
        # RNG: the emulated device draws from the CPU generator, so a run with a
        # fixed seed matches the same program on the CPU.
        # (torch.manual_seed itself calls manual_seed_all: seed the CPU generator
        # directly, never through torch.manual_seed.)
        "manual_seed": lambda seed: torch.default_generator.manual_seed(seed) and None,
        "manual_seed_all": lambda seed: torch.default_generator.manual_seed(seed) and None,
        "initial_seed": torch.initial_seed,
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda new_state, device=None: torch.set_rng_state(new_state),
        "get_device_name": lambda device=None: f"emulated {name} (CPU)",
        "get_amp_supported_dtype": lambda: [torch.bfloat16, torch.float16],
        "_is_in_bad_fork": lambda: False,
        "device": _device_ctx,
    }
    for key, fn in funcs.items():
        fn.__name__ = key
        if name == "tpu" and key in _LEGACY:
            fn = _legacy_guarded(fn, _LEGACY[key])
        setattr(mod, key, fn)
    return mod


class _AcceleratorDeviceIndex:
    """Replacement for ``torch.accelerator.device_index`` that the guard ignores."""

    def __init__(self, device: int | None, /) -> None:
        self.idx = device
        self.prev: int | None = None

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev = state.current_index()
            state.set_current_index(self.idx)

    def __exit__(self, *exc: object) -> None:
        if self.prev is not None:
            state.set_current_index(self.prev)


def _patch_accelerator() -> None:
    acc = torch.accelerator
    acc.current_device_index = state.current_index
    acc.current_device_idx = state.current_index
    acc.set_device_index = lambda device, /: state.set_current_index(_device_index(device) or 0)
    acc.set_device_idx = acc.set_device_index
    acc.synchronize = _synchronize
    acc.device_index = _AcceleratorDeviceIndex


def _patch_compile(name: str) -> None:
    """Accept ``torch.compile(backend=name)`` and run the function eagerly.

    The emulator checks numerics, not compilation: a compiled function on the
    real device runs the same ops, so eager is the faithful reference here.
    """
    original = torch.compile

    @functools.wraps(original)
    def compile(model: Any = None, *args: Any, backend: Any = "inductor", **kwargs: Any) -> Any:
        if backend != name:
            return original(model, *args, backend=backend, **kwargs)
        if model is None:
            return lambda m: m
        return model

    torch.compile = compile


def _let_autograd_threads_settle() -> None:
    """Give the autograd device thread the GIL once more before shutdown.

    Backward on a PrivateUse1 tensor runs on torch's device thread
    ``pt_autograd_0``, which frees the graph (and decrefs our Python tensors)
    after ``backward()`` has returned. If that thread still needs the GIL once
    interpreter finalization has begun, CPython exits the thread by forced
    unwinding through a ``noexcept`` frame, and libstdc++ aborts the process
    ("terminate called without an active exception", exit status 134).
    Sleeping here, before finalization, lets it finish.
    """
    for _ in range(5):
        time.sleep(0.01)


def register(name: str, devices: int) -> None:
    """Make ``name`` a working torch device with ``devices`` CPU-backed ordinals."""
    state.name = name
    state.count = devices
    backend_registration._setup_privateuseone_for_python_backend(
        name, backend_module=make_device_module(name)
    )
    atexit.register(_let_autograd_threads_settle)
    _patch_accelerator()
    _patch_compile(name)
    # Real device tensors are plain torch.Tensor, which optimizers send down their
    # default foreach path; let the wrapper take the same path.
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types_list in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        types_list.append(EmulatedTensor)
    counters.reset()
