"""``torch.save`` / ``torch.load`` of emulated device tensors, ``map_location`` included.

Emulated tensors have no device storage: they are saved as a CPU copy plus torch's
``_rebuild_device_tensor_from_cpu_tensor`` (``EmulatedTensor.__reduce_ex__``), as
torch saves any storage-less PrivateUse1 tensor. Loading then has to give the
results a real device would:

* storages mapped to the device (``map_location="tpu"``, ``torch.device("tpu:1")``,
  ``{"cpu": "tpu:0"}``) stay CPU storages (torch's PrivateUse1 default would call
  ``storage.to("tpu")``, which a Python backend cannot do), marked with the device;
  the tensors rebuilt on them become device tensors viewing them, so a CPU-saved
  checkpoint loads onto the device and tensors that shared a storage still share it;
* a callable ``map_location`` is asked where each device tensor goes (torch's own
  rebuild refuses callables for storage-less tensors);
* a CUDA location (a checkpoint saved on CUDA, ``map_location="cuda"``) is recorded
  as a CUDA call, then torch raises as on any CPU-only build.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch._utils

from .. import patching
from . import cuda, state
from .tensor import EmulatedTensor

_MARK = "_torchport_device_index"


def _storage_tag(storage: Any) -> str | None:
    return None  # emulated tensors are saved as CPU copies (EmulatedTensor.__reduce_ex__)


def _storage_deserialize(storage: Any, location: str) -> Any:
    """Keep a storage mapped to the emulated device on the CPU, marked with its index."""
    if location.split(":")[0] == state.name:
        index = state.check_index(torch.device(location).index)
        setattr(storage, _MARK, index)
        return storage
    cuda.record_load_location(location)  # torch then raises, as on any CPU-only torch
    return None


def _native_deserialize(storage: Any, location: str) -> Any:
    """The native backend: a storage mapped to the device is copied there (device memory
    is real there), after the ordinal check with the emulator's own message."""
    if location.split(":")[0] == state.name:
        index = state.check_index(torch.device(location).index)
        data = torch.empty(0, dtype=torch.uint8).set_(storage)
        return data.to(torch.device(state.name, index)).untyped_storage()
    cuda.record_load_location(location)  # torch then raises, as on any CPU-only torch
    return None


def _on_device(rebuild: Any) -> Any:
    """Wrap a tensor rebuild: a tensor on a marked storage becomes a device tensor."""

    @functools.wraps(rebuild)
    def wrapper(storage: Any, *args: Any, **kwargs: Any) -> Any:
        tensor = rebuild(storage, *args, **kwargs)
        index = getattr(getattr(storage, "_untyped_storage", None), _MARK, None)
        if index is None or isinstance(tensor, EmulatedTensor):
            return tensor
        out = EmulatedTensor(tensor.detach(), index)  # a view of the storage, no copy
        if tensor.requires_grad:
            out.requires_grad_()
        return out

    return wrapper


def _restore_location(real: Any) -> Any:
    @functools.wraps(real)
    def _get_restore_location(device: Any) -> Any:
        map_location = torch.serialization._serialization_tls.map_location
        if map_location is None or isinstance(map_location, dict | str | torch.device):
            return real(device)
        # A callable: ask it, with an empty CPU storage, where a `device` storage goes.
        moved = map_location(torch.UntypedStorage(0), str(device))  # type: ignore[arg-type]  # torch types the storage as the legacy Storage; load passes an UntypedStorage
        return str(getattr(moved, "device", device))

    return _get_restore_location


def install(native: bool = False) -> None:
    """Register the storage package and (Python emulator) wrap torch's tensor rebuilds.

    The native backend's tensors have device storage, which torch saves and rebuilds
    as it does for any device; only the location is the emulator's (ordinal check,
    CUDA record), before torch's PrivateUse1 package (priority 23).
    """
    if native:
        torch.serialization.register_package(11, _storage_tag, _native_deserialize)
        return
    # Before torch's PrivateUse1 package (priority 23), whose deserializer would crash.
    torch.serialization.register_package(11, _storage_tag, _storage_deserialize)
    for name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
        wrapped = _on_device(getattr(torch._utils, name))
        patching.patch(torch._utils, name, wrapped, by="emulator.serialization")
    restore = _restore_location(torch._utils._get_restore_location)
    patching.patch(torch._utils, "_get_restore_location", restore, by="emulator.serialization")
    # weights_only=True allowlists the rebuild functions by identity (cached on first use).
    from torch import _weights_only_unpickler

    _weights_only_unpickler._get_allowed_globals.cache_clear()
