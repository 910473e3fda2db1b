"""The emulated device's identity: its name, how many there are, which is current.

torch 2.13's Python PrivateUse1 device guard hard-codes one device, index 0,
and ignores ``setDevice`` (torch/csrc/acc/Module.cpp), so the Python emulator keeps the
device count and current index here and the backend module reports them; the native
backend's C++ guard keeps the current index, and these functions ask it.

A TorchTPU process sees one device: the core its launcher gave it, as ``tpu:0``. The
emulated host has ``host_count`` devices (what a launcher spawns one rank for), and each
process ``count`` (``PER_PROCESS``); TorchNeuron's processes see all of the host's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import torch

name: str = ""
count: int = 0
# The target's own names for the generic device (sandbox.modes.DeviceNames), or None: the
# device's name is its backends' too (TorchTPU's backends come from its facts).
names: Any = None
# The emulated host's devices: ``activate(devices=N)``, ``torchport run --devices N``.
host_count: int = 0
# Which emulator runs ("native": the C++ backend, "python": the tensor subclass), and why.
backend: str = ""
reason: str = ""
# The native backend's extension module (it keeps the current device in C++), or None.
native: Any = None
_current = threading.local()

# The devices one process sees, by device name (absent: every device of the host).
# TorchTPU binds each process to one device and refuses to switch it
# (torch_tpu/_internal/device/_device_module.py, TpuDeviceModule.set_device).
PER_PROCESS = {"tpu": 1}
# Why an ordinal is out of range, by device name (default: how the emulator was activated).
ORDINAL_NOTES = {
    "tpu": "a TorchTPU process sees one device, tpu:0: each rank runs in its own process "
    "on torch.device('tpu')",
}
# TorchTPU's refusal to change the process's device (TpuDeviceModule.set_device).
_BOUND = (
    "Cannot set TPU device to index {index}, current process is bound to device index "
    "{current}. Changing the active TPU device within a process is not supported."
)

# Device use in a forked child (PjrtBackend::IsInBadFork): set in the child of a process
# that had used the device; every device op then raises ``fork_error``.
initialized = False
bad_fork = False
fork_error = ""


def visible(device_name: str, devices: int) -> int:
    """How many devices one process of ``device_name`` sees on a host of ``devices``."""
    return PER_PROCESS.get(device_name, devices)


def ordinal_note(device_name: str, devices: int) -> str:
    """The reason an out-of-range ordinal gives, for both backends."""
    return ORDINAL_NOTES.get(device_name, f"the emulator was activated with devices={devices}")


def current_index() -> int:
    """Index of this thread's current emulated device (0 unless set)."""
    if native is not None:
        return int(native.current_device())
    return getattr(_current, "index", 0)


def set_current_index(index: int) -> None:
    """Make ``index`` this thread's current device, checking the ordinal (on a device
    whose processes are bound to one, switching away from it raises TorchTPU's ValueError)."""
    if name in PER_PROCESS and index >= 0 and index != current_index():
        raise ValueError(_BOUND.format(index=index, current=current_index()))
    _current.index = check_index(index)
    if native is not None:
        native.set_device(_current.index)


def check_index(index: int | None) -> int:
    """Resolve ``None`` to the current device and reject ordinals out of range."""
    if index is None:
        return current_index()
    if not 0 <= index < count:
        raise RuntimeError(
            f"{name} error: invalid device ordinal {index} ({ordinal_note(name, count)})"
        )
    return index


def device(index: int | None = None) -> torch.device:
    """The ``torch.device`` of emulated device ``index`` (current if None)."""
    return torch.device(name, check_index(index))


# What the device's first use in this process checks (TorchTPU reads its distributed worker
# configuration then: sandbox.tpu_launch.worker_error); "" from it: the device starts.
first_use_check: Callable[[], str] | None = None
_first_use_error = ""


def first_use_error() -> str:
    """The error of the device's first use, read once per process ("" when it starts): the
    worker configuration's variables are read once (TorchTPU's GetEnvOnce), so a failed
    start fails the same way at every later use."""
    global _first_use_error, first_use_check
    if first_use_check is not None:
        _first_use_error, first_use_check = first_use_check(), None
    return _first_use_error


def touch() -> None:
    """A device tensor is made or used: the device is initialized in this process,
    unless this is a forked child of a process that had initialized it, or its first use
    fails (``first_use_check``)."""
    global initialized
    if bad_fork:
        raise RuntimeError(fork_error)
    if not initialized and first_use_error():
        raise RuntimeError(_first_use_error)
    initialized = True


def initialize() -> None:
    """The device starts without a tensor being made (the tpu process group's creation
    does): the same first-use checks, on either backend."""
    if native is not None:
        native.touch()
    else:
        touch()


def _after_fork_in_child() -> None:
    global bad_fork
    bad_fork = initialized


def install_fork_check(error: str) -> None:
    """Refuse device use in a forked child of a process that used the device (the
    Python backend; the native one keeps the same flags in C++)."""
    global fork_error
    fork_error = error
    os.register_at_fork(after_in_child=_after_fork_in_child)


def in_bad_fork() -> bool:
    """``torch.<device>._is_in_bad_fork()``: torch's seeding skips the device then."""
    if native is not None:
        return bool(native.in_bad_fork())
    return bad_fork
