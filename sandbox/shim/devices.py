"""Map every CUDA device a program names onto the CPU.

A TorchFunctionMode sees every torch call (factories, tensor methods, `Module.to` through
`torch._C._nn._parse_to`) and rewrites `device=` / positional devices before the CPU-only
torch would reject them (it raises "Torch not compiled with CUDA enabled"). What never
reaches `__torch_function__` is patched directly: `Module.cuda`, `torch.load`,
`torch.Generator`, `DataLoader(pin_memory=True)`, FSDP's `device_id` and the legacy
`torch.cuda.*Tensor` types.

Known gap: moving a CPU tensor "to CUDA" returns the same tensor (as `.to("cpu")` does)
instead of a copy, so code that mutates the moved tensor also mutates the original.
"""

from __future__ import annotations

import functools
import inspect
import sys
from types import ModuleType
from typing import Any

import torch
import torch.serialization
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.data import DataLoader

from .. import patching
from ..importhook import PatchOnImport
from .recording import quiet, record

CPU = torch.device("cpu")
_LEGACY_TYPES = [
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "ByteTensor",
    "CharTensor",
    "ShortTensor",
    "IntTensor",
    "LongTensor",
    "BoolTensor",
]


def is_cuda_device(value: Any) -> bool:
    """True for "cuda", "cuda:N", torch.device("cuda", N) (and a bare int index)."""
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    if isinstance(value, torch.device):
        return value.type == "cuda"
    return type(value) is int


def map_device(value: Any) -> Any:
    """The CPU device for a CUDA device, anything else unchanged."""
    return CPU if is_cuda_device(value) else value


def _name(func: Any) -> str:
    name = resolve_name(func) or getattr(func, "__name__", repr(func))
    return name.replace("torch.Tensor.", "Tensor.")


def _to(func: Any, args: tuple, kwargs: dict) -> Any:
    if len(args) > 1 and is_cuda_device(args[1]):
        record("Tensor.to(cuda)")
        args = (args[0], CPU, *args[2:])
    return func(*args, **kwargs)


def _parse_to(func: Any, args: tuple, kwargs: dict) -> Any:
    if args and is_cuda_device(args[0]):
        record("Module.to(cuda)")
        args = (CPU, *args[1:])
    return func(*args, **kwargs)


def _tensor_cuda(func: Any, args: tuple, kwargs: dict) -> Any:
    record("Tensor.cuda")
    memory_format = kwargs.get("memory_format", torch.preserve_format)
    return args[0].to(CPU, memory_format=memory_format)


def _pin_memory(func: Any, args: tuple, kwargs: dict) -> Any:
    record("Tensor.pin_memory")
    return args[0]


def _record_stream(func: Any, args: tuple, kwargs: dict) -> Any:
    record("Tensor.record_stream")
    return None


def _tensor_type(func: Any, args: tuple, kwargs: dict) -> Any:
    target = args[1] if len(args) > 1 else kwargs.get("dtype")
    if isinstance(target, str) and target.startswith("torch.cuda."):
        record("Tensor.type(torch.cuda.*)")
        target = "torch." + target[len("torch.cuda.") :]
        args = (args[0], target, *args[2:]) if len(args) > 1 else args
        if "dtype" in kwargs:
            kwargs = {**kwargs, "dtype": target}
    return func(*args, **kwargs)


def _device(func: Any, args: tuple, kwargs: dict) -> Any:
    """``torch.device(N)``: the current accelerator's device N, which on the CUDA machine the
    shim stands for is ``cuda:N`` (a CPU-only torch has no accelerator and raises). The CUDA
    device is kept, as ``torch.device("cuda", N)`` is: the calls that use it map it."""
    if len(args) == 1 and not kwargs and type(args[0]) is int:
        record("torch.device(int)")
        return func("cuda", args[0])
    return func(*args, **kwargs)


_SPECIAL = {
    torch.device: _device,
    torch.Tensor.to: _to,
    torch._C._nn._parse_to: _parse_to,
    torch.Tensor.cuda: _tensor_cuda,
    torch.Tensor.pin_memory: _pin_memory,
    torch.Tensor.record_stream: _record_stream,
    torch.Tensor.type: _tensor_type,
}


class CudaToCpuMode(TorchFunctionMode):
    """Rewrites CUDA devices (and pinned-memory requests) in every torch call to the CPU."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if kwargs:
            device = kwargs.get("device")
            if device is not None and is_cuda_device(device):
                record(f"{_name(func)}(device=cuda)")
                kwargs = {**kwargs, "device": CPU}
            if kwargs.get("pin_memory"):
                record(f"{_name(func)}(pin_memory=True)")
                kwargs = {**kwargs, "pin_memory": False}
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs)
        return func(*args, **kwargs)


def _module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
    record("Module.cuda")
    with quiet():
        return self.to(CPU)


def _map_location(map_location: Any) -> Any:
    if map_location is None or is_cuda_device(map_location):
        return CPU
    if isinstance(map_location, dict):
        table = {k: map_device(v) for k, v in map_location.items()}

        def by_table(storage: Any, location: str) -> Any:
            target = table.get(location, location)
            if is_cuda_device(target) or str(target) == "cpu":
                return storage
            return torch.serialization.default_restore_location(storage, str(target))

        return by_table
    if callable(map_location):
        user_fn = map_location

        def guarded(storage: Any, location: str) -> Any:
            try:
                result = user_fn(storage, location)
            except (RuntimeError, AssertionError):  # it tried to move the storage to CUDA
                return storage
            return storage if result is None else result

        return guarded
    return map_location


def _make_load(real_load: Any) -> Any:
    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        """torch.load, with CUDA map_locations (and CUDA-saved storages) restored to the CPU."""
        if map_location is not None and is_cuda_device(map_location):
            record("torch.load(map_location=cuda)")
        elif isinstance(map_location, dict) and any(map(is_cuda_device, map_location.values())):
            record("torch.load(map_location={...: cuda})")
        return real_load(f, _map_location(map_location), *args, **kwargs)

    functools.update_wrapper(load, real_load, assigned=(), updated=())  # __wrapped__ only
    return load


_RealGenerator = torch._C.Generator


class _GeneratorMeta(type):
    """Makes the replacement `torch.Generator` build (and isinstance-match) real generators."""

    def __call__(cls, device: Any = "cpu") -> Any:
        if is_cuda_device(device):
            record("torch.Generator(device=cuda)")
            device = CPU
        return _RealGenerator(device)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _RealGenerator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, _RealGenerator)

    def __getattr__(cls, name: str) -> Any:
        return getattr(_RealGenerator, name)


class Generator(metaclass=_GeneratorMeta):
    """Stand-in for `torch.Generator`: `Generator(device="cuda")` gives a CPU generator."""


def _make_dataloader_init(real_init: Any) -> Any:
    signature = inspect.signature(real_init)

    def __init__(self: DataLoader, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind_partial(self, *args, **kwargs)
        if bound.arguments.get("pin_memory"):
            record("DataLoader(pin_memory=True)")
            bound.arguments["pin_memory"] = False
            bound.arguments.pop("pin_memory_device", None)
        real_init(*bound.args, **bound.kwargs)

    functools.update_wrapper(__init__, real_init, assigned=(), updated=())  # __wrapped__ only
    return __init__


def _make_fsdp_init(real_init: Any) -> Any:
    """FSDP's ``device_id`` names the device its flat parameters live and compute on; a CUDA
    one (``torch.cuda.current_device()``, ``"cuda:0"``) is the CPU here, as every other CUDA
    device is, else FSDP checks the parameters the shim kept on the CPU against CUDA."""
    signature = inspect.signature(real_init)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind_partial(self, *args, **kwargs)
        device_id = bound.arguments.get("device_id")
        if device_id is not None and is_cuda_device(device_id):
            record("FullyShardedDataParallel(device_id=cuda)")
            bound.arguments["device_id"] = CPU
        real_init(*bound.args, **bound.kwargs)

    functools.update_wrapper(__init__, real_init, assigned=(), updated=())  # __wrapped__ only
    return __init__


FSDP_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def _states_on_the_cpu_device(module_states: list[torch.Tensor]) -> None:
    """FSDP's ``sync_module_states=True`` refuses CPU tensors because NCCL cannot broadcast
    them; the shim's CUDA is the CPU and its process group gloo, which can: the broadcast
    that follows is the one the CUDA machine makes."""
    if module_states:
        record("FullyShardedDataParallel(sync_module_states=True)")


def _patch_fsdp(module: ModuleType) -> None:
    fsdp = module.FullyShardedDataParallel
    patching.patch(fsdp, "__init__", _make_fsdp_init(fsdp.__init__), by="shim.devices")
    init_utils = sys.modules.get("torch.distributed.fsdp._init_utils")
    check = "_check_module_states_for_sync_module_states"
    if init_utils is not None and hasattr(init_utils, check):
        patching.patch(init_utils, check, _states_on_the_cpu_device, by="shim.devices")


# FSDP patched when the program imports it (importing it for every run costs a second)
_FSDP_FINDER = PatchOnImport(FSDP_MODULE, _patch_fsdp)


_mode: CudaToCpuMode | None = None


def install() -> None:
    """Enter the device-mapping mode (this thread) and patch what the mode cannot see."""
    global _mode
    patching.patch(torch.nn.Module, "cuda", _module_cuda, by="shim.devices")
    load = _make_load(patching.original(torch.serialization, "load"))
    patching.patch(torch, "load", load, by="shim.devices")
    patching.patch(torch.serialization, "load", load, by="shim.devices")
    patching.patch(torch, "Generator", Generator, by="shim.devices")
    patching.patch(
        DataLoader, "__init__", _make_dataloader_init(DataLoader.__init__), by="shim.devices"
    )
    for name in _LEGACY_TYPES:
        patching.patch(torch.cuda, name, getattr(torch, name), by="shim.devices")
    if FSDP_MODULE in sys.modules:
        _patch_fsdp(sys.modules[FSDP_MODULE])
    elif _FSDP_FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FSDP_FINDER)
    _mode = CudaToCpuMode()
    _mode.__enter__()


def uninstall() -> None:
    """Leave the device-mapping mode (its patches are undone by `patching.undo_all("shim")`)."""
    global _mode
    if _FSDP_FINDER in sys.meta_path:
        sys.meta_path.remove(_FSDP_FINDER)
    if _mode is not None:
        _mode.__exit__(None, None, None)
        _mode = None
