"""The emulated device's identity: its name, how many there are, which is current.

torch 2.13's Python PrivateUse1 device guard hard-codes one device, index 0,
and ignores ``setDevice`` (torch/csrc/acc/Module.cpp), so the Python emulator keeps the
device count and current index here and the backend module reports them; the native
backend's C++ guard keeps the current index, and these functions ask it.
"""

from __future__ import annotations

import threading
from typing import Any

import torch

name: str = ""
count: int = 0
# Which emulator runs ("native": the C++ backend, "python": the tensor subclass), and why.
backend: str = ""
reason: str = ""
# The native backend's extension module (it keeps the current device in C++), or None.
native: Any = None
_current = threading.local()


def current_index() -> int:
    """Index of this thread's current emulated device (0 unless set)."""
    if native is not None:
        return int(native.current_device())
    return getattr(_current, "index", 0)


def set_current_index(index: int) -> None:
    """Make ``index`` this thread's current device, checking the ordinal."""
    _current.index = check_index(index)
    if native is not None:
        native.set_device(_current.index)


def check_index(index: int | None) -> int:
    """Resolve ``None`` to the current device and reject ordinals out of range."""
    if index is None:
        return current_index()
    if not 0 <= index < count:
        raise RuntimeError(
            f"{name} error: invalid device ordinal {index} "
            f"(the emulator was activated with devices={count})"
        )
    return index


def device(index: int | None = None) -> torch.device:
    """The ``torch.device`` of emulated device ``index`` (current if None)."""
    return torch.device(name, check_index(index))
