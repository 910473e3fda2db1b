"""Register the emulated device with torch as a Python PrivateUse1 backend.

Uses ``torch.utils.backend_registration._setup_privateuseone_for_python_backend``
(experimental in torch 2.13) for the device name, ``Tensor.<name>()`` /
``is_<name>``, ``Module.<name>()``, hooks and guard; then supplies what that
helper cannot: a device module (``torch.<name>``) that knows the device count,
and ``torch.accelerator`` index functions, because the Python device guard is
fixed at one device, index 0, with a no-op ``setDevice``. The same guard makes
torch resolve an index-less ``"tpu"`` to ``tpu:0`` and gives the autograd engine
a single device queue, so ``Tensor.to`` / ``torch.tensor`` are taught the current
device and backward runs on the calling thread. Then ``torch.Generator``
(generator.py), memory statistics (memory.py), CUDA-use records (cuda.py),
serialization (serialization.py), ``torch.compile``, ``torch.distributed`` and
pinning are set up for the device.
"""

from __future__ import annotations

import atexit
import functools
import time
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import backend_registration
from torch.utils._pytree import tree_flatten

from .. import patching, torchtpu_facts, tpu_launch
from . import (
    counters,
    cuda,
    device_api,
    generator,
    internal_api,
    memory,
    process_group,
    serialization,
    state,
)
from .tensor import EmulatedTensor


def _device_index(device: Any) -> int | None:
    if device is None:
        return None
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != state.name:
        raise ValueError(f"expected a {state.name} device, got {device}")
    return device.index


def _synchronize(device: Any = None) -> None:
    # The emulator runs eagerly on the CPU: nothing is ever in flight.
    state.check_index(_device_index(device))


class _DeviceContext:
    """``with torch.<device>.device(index):`` makes ``index`` current inside the block
    (a class, named as TorchTPU's: its internal-API error names the class)."""

    def __init__(self, device: Any) -> None:
        self.idx = _device_index(device)
        self.prev = -1

    def __enter__(self) -> None:
        self.prev = state.current_index()
        if self.idx is not None and self.idx >= 0:
            state.set_current_index(self.idx)

    def __exit__(self, *exc: object) -> None:
        state.set_current_index(self.prev)


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
        "_is_in_bad_fork": state.in_bad_fork,
    }
    for key, fn in funcs.items():
        fn.__name__ = key
        setattr(mod, key, fn)
    mod.__dict__["device"] = _DeviceContext
    for key, value in device_api.extra_functions(name).items():
        setattr(mod, key, value)
    if name == "tpu":
        mod = device_api.with_properties(mod)
        internal_api.guard_module(mod)
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


def _set_device_index(device: Any, /) -> None:
    state.set_current_index(_device_index(device) or 0)


def _patch_accelerator() -> None:
    answers: dict[str, Any] = {
        "current_device_index": state.current_index,
        "current_device_idx": state.current_index,
        "set_device_index": _set_device_index,
        "set_device_idx": _set_device_index,
        "synchronize": _synchronize,
        "device_index": _AcceleratorDeviceIndex,
        "current_stream": lambda device=None, /: device_api.current_stream(device),
    }
    for name, answer in answers.items():
        patching.patch(torch.accelerator, name, answer, by="emulator.backend")


def _on_device(*objs: Any) -> bool:
    """True if any tensor in ``objs`` (or a module's parameters/buffers) is a device tensor."""
    for obj in objs:
        if isinstance(obj, torch.nn.Module):
            tensors = [*obj.parameters(), *obj.buffers()]
        else:
            tensors = [x for x in tree_flatten(obj)[0] if isinstance(x, torch.Tensor)]
        if any(t.device.type == state.name for t in tensors):
            return True
    return False


def _inductor_refused(name: str) -> RuntimeError:
    return RuntimeError(
        f"torch.compile(backend='inductor') cannot compile for {name} tensors; "
        f"use backend={name!r} (the default for {name} inputs) or leave backend unset."
    )


_UNSET = object()


def _patch_compile(name: str, own: str) -> None:
    """``torch.compile`` as on the device ``name``: its backend ``own`` runs the function
    eagerly.

    The emulator checks numerics, not compilation: a compiled function on the
    real device runs the same ops, so eager is the faithful reference here. As in
    TorchTPU, ``own`` is also the default backend for device inputs (a module
    whose parameters are on the device when compiled, or a function called with
    device tensors), and ``backend="inductor"`` with TPU inputs raises. Other
    backends, and the default backend for CPU inputs, are torch's own. CUDA-graph
    modes (``mode="reduce-overhead"``...) mean nothing there and are ignored.
    """
    original = torch.compile

    @functools.wraps(original)
    def compile(model: Any = None, *args: Any, backend: Any = _UNSET, **kwargs: Any) -> Any:
        if model is None:
            return lambda m: compile(m, *args, backend=backend, **kwargs)
        if backend == own:
            return model
        if backend is not _UNSET and backend != "inductor":
            return original(model, *args, backend=backend, **kwargs)
        refuse = backend == "inductor" and name == "tpu"
        real_backend = "inductor" if backend is _UNSET else backend
        if isinstance(model, torch.nn.Module):
            if _on_device(model):
                if refuse:
                    raise _inductor_refused(name)
                return model
            return original(model, *args, backend=real_backend, **kwargs)
        compiled: list[Any] = []

        @functools.wraps(model)
        def run(*call_args: Any, **call_kwargs: Any) -> Any:
            if _on_device(call_args, call_kwargs):
                if refuse:
                    raise _inductor_refused(name)
                return model(*call_args, **call_kwargs)
            if not compiled:
                compiled.append(original(model, *args, backend=real_backend, **kwargs))
            return compiled[0](*call_args, **call_kwargs)

        return run

    patching.patch(torch, "compile", compile, by="emulator.backend")


def _resolve(device: Any) -> Any:
    """``"tpu"`` (no index) -> the current emulated device, as ``"cuda"`` means on CUDA."""
    if isinstance(device, str):
        if device == state.name:
            return torch.device(state.name, state.current_index())
    elif isinstance(device, torch.device) and device.type == state.name and device.index is None:
        return torch.device(state.name, state.current_index())
    return device


def _with_current_device(fn: Callable[..., Any], position: int | None) -> Callable[..., Any]:
    """Wrap ``fn`` so that an index-less device argument means the current device.

    torch resolves a missing index in C++, through the device guard, before the
    emulator's kernels run; the Python backend's guard always answers 0. Factory
    functions keep ``device=`` unresolved and need no wrapper; ``Tensor.to`` and the
    ``torch.tensor`` family do. ``position`` is the device's positional index, if any.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if state.current_index():  # index 0 is what torch fills in anyway
            if "device" in kwargs:
                kwargs["device"] = _resolve(kwargs["device"])
            elif position is not None and len(args) > position:
                args = (*args[:position], _resolve(args[position]), *args[position + 1 :])
        return fn(*args, **kwargs)

    return wrapper


def _patch_device_resolution() -> None:
    """``x.to("tpu")``, ``torch.tensor(..., device="tpu")``: on the current device."""
    for name, position in (("to", 1), ("new_tensor", None)):
        wrapped = _with_current_device(getattr(torch.Tensor, name), position)
        patching.patch(torch.Tensor, name, wrapped, by="emulator.backend")
    for name in ("tensor", "as_tensor", "asarray", "sparse_coo_tensor"):
        original = getattr(torch, name)
        wrapper = _with_current_device(original, None)
        patching.patch(torch, name, wrapper, by="emulator.backend")
        _same_jit_builtin(original, wrapper)


def _same_jit_builtin(original: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """TorchScript calls ``torch.tensor`` as the builtin ``aten::tensor`` by looking the
    function up by identity; a wrapper it does not know it tries to compile from source
    and fails (``import torch.distributed.optim`` scripts its functional optimizers)."""
    from torch.jit._builtins import _find_builtin, _register_builtin

    op = _find_builtin(original)
    if op is not None:
        _register_builtin(wrapper, op)


def _single_threaded_backward(real: Callable[..., Any]) -> Callable[..., Any]:
    """Run every backward pass on the calling thread (autograd multithreading off).

    torch's autograd engine gives each device index its own worker thread and
    ready queue, as many as the device guard's ``deviceCount()``: the Python
    PrivateUse1 guard answers 1, so backward through tensors on ``tpu:1`` and
    above fails an internal assert (engine.cpp, ``device_ready_queues_``). With
    multithreading disabled the engine uses the caller's CPU queue for all
    devices; the ops and their order, hence the numbers, are the same. The native
    backend's C++ guard counts every ordinal, so it would work multithreaded too;
    it runs backward here as well, so that the device threads never hold work or
    Python objects when the interpreter exits (see ``_let_autograd_threads_settle``).
    """

    @functools.wraps(real)
    def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        previous = torch._C._is_multithreading_enabled()
        torch._C._set_multithreading_enabled(False)
        try:
            return real(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(previous)

    return _engine_run_backward


def _let_autograd_threads_settle() -> None:
    """Give the autograd device thread the GIL once more before shutdown.

    Backward on a PrivateUse1 tensor runs on torch's device thread
    ``pt_autograd_0``, which frees the graph (and decrefs our Python tensors)
    after ``backward()`` has returned. If that thread still needs the GIL once
    interpreter finalization has begun, CPython exits the thread by forced
    unwinding through a ``noexcept`` frame, and libstdc++ aborts the process
    ("terminate called without an active exception", exit status 134).
    Sleeping here, before finalization, lets it finish. With backward on the calling
    thread (``_single_threaded_backward``) that thread has nothing left to free; the
    sleep stays as a guard for backward passes started some other way. (Native
    backend, 2026-12: 0 aborts in 30 runs with both, 0 in 20 without the sleep, 0 in
    20 multithreaded without the sleep; the prototype's 2 in 6 did not reproduce.)
    """
    for _ in range(5):
        time.sleep(0.01)


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """A pinned copy, as torch makes one; pinning itself is a no-op here.

    The emulated device's memory is host memory. torch 2.13 pins for a PrivateUse1
    accelerator through the C++ ``PrivateUse1HooksInterface::getPinnedMemoryAllocator``,
    which a Python backend cannot provide; pinning only speeds up DMA, never changes
    values. The copy is flagged so that ``is_pinned()`` answers as on a device.
    """
    if self.device.type != "cpu":
        kind = torch.empty(0, dtype=self.dtype).type()  # torch.FloatTensor
        kind = kind.replace("torch.", f"torch.{self.device.type}.", 1)
        raise RuntimeError(f"cannot pin '{kind}' only dense CPU tensors can be pinned")
    if _is_pinned(self):
        return self
    out = self.clone()
    out.__dict__["_torchport_pinned"] = True  # what _is_pinned reads
    return out


def _is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return bool(getattr(self, "_torchport_pinned", False))


def _sync_reporting(real: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``Tensor.__repr__`` / ``tolist`` of a device tensor: one sync at the user's call.

    Printing reads device memory, but torch's printing makes several reads of its own;
    they are one sync, at the user's ``print``. The Python emulator's tensor subclass
    overrides both methods itself, so on that backend only the native tensors (none)
    would reach these; the patch is shared to keep one set of patches.
    """

    @functools.wraps(real)
    def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.device.type != state.name:
            return real(self, *args, **kwargs)
        counters.record_sync(kind)
        if kind == "tolist":
            counters.record_transfer("d2h", self.numel() * self.element_size())
        with counters.quiet():
            return real(self, *args, **kwargs)

    return method


def register(name: str, devices: int) -> None:
    """Make ``name`` a working torch device on a host of ``devices`` CPU-backed devices
    (each process sees ``state.visible(name, devices)`` of them)."""
    state.name = name
    state.count, state.host_count = state.visible(name, devices), devices
    if name == "tpu":
        state.install_fork_check(torchtpu_facts.section("distributed")["fork_error"])
        state.first_use_check = tpu_launch.worker_error
    generator.install()
    module = make_device_module(name)
    backend_registration._setup_privateuseone_for_python_backend(name, backend_module=module)
    install_shared(name, module)
    _patch_device_resolution()
    # Real device tensors are plain torch.Tensor, which optimizers send down their
    # default foreach path; let the wrapper take the same path.
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types_list in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        types_list.append(EmulatedTensor)  # type: ignore[arg-type]  # torch types the list as of torch.Tensor's metaclass
    serialization.install()
    counters.reset()


def install_shared(name: str, module: types.ModuleType) -> None:
    """What both backends (Python and native) add to torch once the device is named:
    generators, backward on the calling thread, torch.accelerator, memory statistics,
    CUDA-use records, torch.compile, torch.distributed (process_group.py), pinning, the step
    counter."""
    module.__dict__["default_generators"] = generator.default_generators()  # needs the name
    atexit.register(_let_autograd_threads_settle)
    import torch.autograd.graph

    backward = _single_threaded_backward(torch.autograd.graph._engine_run_backward)
    for owner in (torch.autograd.graph, torch.autograd):
        patching.patch(owner, "_engine_run_backward", backward, by="emulator.backend")
    _patch_accelerator()
    memory.install()
    cuda.install()
    own = state.names
    _patch_compile(name, own.compile_backend if own is not None else name)
    process_group.install(name, own.dist_backend if own is not None else name)
    patching.patch(torch.Tensor, "pin_memory", _pin_memory, by="emulator.backend")
    patching.patch(torch.Tensor, "is_pinned", _is_pinned, by="emulator.backend")
    for method, kind in (("__repr__", "print"), ("tolist", "tolist")):
        wrapped = _sync_reporting(getattr(torch.Tensor, method), kind)
        patching.patch(torch.Tensor, method, wrapped, by="emulator.backend")
    from torch.optim import optimizer

    optimizer.register_optimizer_step_post_hook(counters.record_optimizer_step)
