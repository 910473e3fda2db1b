"""Device memory statistics for ``torch.accelerator.memory_allocated()`` and friends.

``torch.accelerator.memory_*`` reach the C++ ``DeviceAllocator`` of the current
accelerator; a Python PrivateUse1 backend has none, and torch 2.13 fails an
internal assert ("Allocator for tpu is not a DeviceAllocator"). The emulator
answers them from its own books instead: every device tensor's CPU storage is
counted once, on its device, from the first wrapper that holds it until the last
one is freed. There is no caching allocator, so "reserved" equals "allocated"
and ``empty_cache()`` frees nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import defaultdict
from typing import Any

import torch

from .. import patching
from . import state

_lock = threading.Lock()
# (device index, storage data pointer) -> [bytes, live wrappers]
_storages: dict[tuple[int, int], list[int]] = {}
_current: defaultdict[int, int] = defaultdict(int)
_peak: defaultdict[int, int] = defaultdict(int)
_allocated: defaultdict[int, int] = defaultdict(int)  # accumulated bytes
_freed: defaultdict[int, int] = defaultdict(int)
_allocs: defaultdict[int, int] = defaultdict(int)
_frees: defaultdict[int, int] = defaultdict(int)


def _release(key: tuple[int, int]) -> None:
    with _lock:
        entry = _storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _storages[key]
            _current[key[0]] -= entry[0]
            _freed[key[0]] += entry[0]
            _frees[key[0]] += 1


def track(wrapper: torch.Tensor, elem: torch.Tensor, index: int) -> None:
    """Account for ``elem``'s storage while ``wrapper`` (a device tensor) lives.

    Sparse and other storage-less layouts are not counted (their parts are).
    """
    if elem.layout != torch.strided:
        return
    storage = elem.untyped_storage()
    nbytes = storage.nbytes()
    if nbytes == 0:
        return
    key = (index, storage.data_ptr())
    with _lock:
        entry = _storages.get(key)
        if entry is None:
            _storages[key] = [nbytes, 1]
            _current[index] += nbytes
            _allocated[index] += nbytes
            _allocs[index] += 1
            if _current[index] > _peak[index]:
                _peak[index] = _current[index]
        else:
            entry[1] += 1
    weakref.finalize(wrapper, _release, key).atexit = False


def _index(device_index: Any) -> int:
    if device_index is None:
        return state.current_index()
    return state.check_index(int(device_index))


def _books(i: int) -> tuple[int, int, int, int, int, int]:
    """Device ``i``'s current, peak, allocated and freed bytes, allocations and frees.

    The native backend keeps them in C++ (its allocator and the results it adopts).
    """
    if state.native is not None:
        current, peak, allocated, freed, allocs, frees = state.native.memory_stats(i)
        return current, peak, allocated, freed, allocs, frees
    with _lock:
        return _current[i], _peak[i], _allocated[i], _freed[i], _allocs[i], _frees[i]


def device_stats(device_index: Any = None) -> dict[str, Any]:
    """``torch._C._accelerator_getDeviceStats``: the nested dict torch flattens."""
    i = _index(device_index)
    current, peak, allocated, freed, allocs, frees = _books(i)
    bytes_stat = {"current": current, "peak": peak, "allocated": allocated, "freed": freed}
    count_stat = {
        "current": allocs - frees,
        "peak": allocs - frees,
        "allocated": allocs,
        "freed": frees,
    }
    pools = ("all", "small_pool", "large_pool")
    return {
        "allocated_bytes": {p: dict(bytes_stat) for p in pools},
        "reserved_bytes": {p: dict(bytes_stat) for p in pools},
        "active_bytes": {p: dict(bytes_stat) for p in pools},
        "requested_bytes": {p: dict(bytes_stat) for p in pools},
        "allocation": {p: dict(count_stat) for p in pools},
        "segment": {p: dict(count_stat) for p in pools},
        "active": {p: dict(count_stat) for p in pools},
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "num_sync_all_streams": 0,
        "num_device_alloc": allocs,
        "num_device_free": frees,
    }


def reset_peak(device_index: Any = None) -> None:
    """``torch._C._accelerator_resetPeakStats``: the peak restarts from current use."""
    i = _index(device_index)
    if state.native is not None:
        state.native.reset_peak(i)
        return
    with _lock:
        _peak[i] = _current[i]


def reset_accumulated(device_index: Any = None) -> None:
    """``torch._C._accelerator_resetAccumulatedStats``."""
    i = _index(device_index)
    if state.native is not None:
        state.native.reset_accumulated(i)
        return
    with _lock:
        _allocated[i] = _freed[i] = 0
        _allocs[i] = _frees[i] = 0


def memory_info(device_index: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes: the emulated device's memory is the host's."""
    _index(device_index)
    page = os.sysconf("SC_PAGE_SIZE")
    return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")


def install() -> None:
    """Answer torch.accelerator's memory calls from the emulator's books."""
    c, by = torch._C, "emulator.memory"
    patching.patch(c, "_accelerator_isAllocatorInitialized", lambda: True, by=by)
    patching.patch(c, "_accelerator_getDeviceStats", device_stats, by=by)
    patching.patch(c, "_accelerator_resetPeakStats", reset_peak, by=by)
    patching.patch(c, "_accelerator_resetAccumulatedStats", reset_accumulated, by=by)
    patching.patch(c, "_accelerator_emptyCache", lambda: None, by=by)
    patching.patch(c, "_accelerator_emptyHostCache", lambda: None, by=by)
    patching.patch(c, "_accelerator_getMemoryInfo", memory_info, by=by)
