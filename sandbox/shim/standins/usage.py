"""The record of which reference stand-ins a run used (for the run's result).

Every stand-in function or class calls :func:`record` with the public name the program
knows it by (``"flash_attn.flash_attn_func"``) the first time it is called or built.
"""

from __future__ import annotations

import threading

_used: set[str] = set()
_lock = threading.Lock()


def record(api: str) -> None:
    """Note one use of the stand-in for ``api`` (its public, library-qualified name)."""
    if api in _used:
        return
    with _lock:
        _used.add(api)


def records() -> list[str]:
    """The stand-ins used so far, sorted: ``["apex.optimizers.FusedAdam", ...]``."""
    with _lock:
        return sorted(_used)


def reset() -> None:
    """Forget the uses recorded so far."""
    with _lock:
        _used.clear()
