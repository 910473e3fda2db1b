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


def _storage_tag(storage: Any) -> str | None:
    return None  # emulated tensors are saved as CPU copies (EmulatedTensor.__reduce_ex__)


def _storage_deserialize(storage: Any, location: str) -> Any:
    """Keep storages on the CPU when ``torch.load(..., map_location=<device>)``.

    torch's PrivateUse1 default would call ``storage.to(<device>)``, and the
    emulated device has no storages (it crashes). Emulated tensors are saved as a
    CPU copy plus a rebuild that moves them with ``.to(map_location)``, so the
    CPU storage is what that rebuild needs. (A plain CPU tensor saved and loaded
    with ``map_location=<device>`` therefore stays on the CPU here.)
    """
    if location.split(":")[0] == state.name:
        state.check_index(torch.device(location).index)
        return storage
    return None


def _gloo_creator(store: Any, rank: int, size: int, timeout: Any) -> Any:
    import torch.distributed as dist

    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _register_distributed(name: str) -> None:
    """``init_process_group(backend=name)`` (TorchTPU also accepts ``tpu_dist``).

    Collectives are dispatcher ops (``c10d::allreduce_``...), so on emulated
    tensors they reach ``__torch_dispatch__``, which calls them again on the CPU
    tensors inside: gloo runs them, in place, and the wrappers see the result.
    """
    import torch.distributed as dist

    if not dist.is_available():
        return
    aliases = (name, "tpu_dist") if name == "tpu" else (name,)
    for alias in aliases:
        if (
            alias.upper() not in dist.Backend.backend_list
            and alias not in dist.Backend.backend_list
        ):
            dist.Backend.register_backend(alias, _gloo_creator, devices=["cpu", name])


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """Pinning is a no-op: the emulated device's memory is host memory.

    torch 2.13 pins for a PrivateUse1 accelerator through the C++
    ``PrivateUse1HooksInterface::getPinnedMemoryAllocator``, which a Python
    backend cannot provide; pinning only speeds up DMA, never changes values.
    """
    return self


def _is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return False


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
    # Before torch's PrivateUse1 package (priority 23), whose deserializer would crash.
    torch.serialization.register_package(11, _storage_tag, _storage_deserialize)
    _register_distributed(name)
    torch.Tensor.pin_memory = _pin_memory  # type: ignore[method-assign]
    torch.Tensor.is_pinned = _is_pinned  # type: ignore[method-assign]
    optimizer.register_optimizer_step_post_hook(counters.record_optimizer_step)
    counters.reset()
