"""Which CUDA APIs the program used, and where: the verifier's runtime evidence.

Each interception is attributed to the first stack frame outside torch, the shim and the
interpreter's import/run machinery, i.e. the line of the user's program that asked for CUDA.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_SHIM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB_SKIP = ("runpy.py", "contextlib.py", "functools.py")

_counts: Counter[tuple[str, str, int]] = Counter()
_lock = threading.Lock()
_local = threading.local()


def _is_internal(filename: str) -> bool:
    if filename.startswith((_TORCH_DIR, _SHIM_DIR)) or filename.startswith("<frozen"):
        return True
    return os.path.basename(filename) in _STDLIB_SKIP and "site-packages" not in filename


def caller_site() -> tuple[str, int]:
    """(file, line) of the innermost frame that belongs to user code."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def record(api: str, direct: bool = False) -> None:
    """Count one use of `api` at the user's call site (unless inside a shim wrapper).

    With `direct`, a call made by torch itself (not by the caller of the shim function that
    records) is not the program's and is not counted: torch asks `torch.cuda.is_available()`
    internally, for instance.
    """
    if getattr(_local, "quiet", 0):
        return
    if direct and _is_internal(sys._getframe(2).f_code.co_filename):
        return
    site = caller_site()
    with _lock:
        _counts[(api, site[0], site[1])] += 1


@contextmanager
def quiet() -> Iterator[None]:
    """Suppress recording while a shim wrapper calls torch (its inner calls are not the user's)."""
    _local.quiet = getattr(_local, "quiet", 0) + 1
    try:
        yield
    finally:
        _local.quiet -= 1


def intercepted() -> list[dict[str, object]]:
    """Every intercepted API with its call site and count, sorted by api, file, line."""
    with _lock:
        items = sorted(_counts.items())
    return [{"api": a, "file": f, "line": n, "count": c} for (a, f, n), c in items]


def reset() -> None:
    """Forget everything recorded so far."""
    with _lock:
        _counts.clear()
