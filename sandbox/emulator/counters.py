"""Per-process counters of what an emulated device run did.

A real accelerator hides costs that a CPU run cannot show: every host sync
(``.item()``, ``.cpu()``, printing) stalls the device, every transfer crosses a
bus, and float64 is slow or absent on TPU and Trainium. The emulator counts them
so that a port can be judged on more than "the losses match".
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from collections import Counter
from types import FrameType
from typing import Any

import torch

from . import state

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# this package and the native backend's Python side (sandbox/native) beside it
_OUR_DIRS = tuple(
    os.path.join(os.path.dirname(os.path.dirname(__file__)), name) + os.sep
    for name in ("emulator", "native")
)

_lock = threading.Lock()
_ops: Counter[str] = Counter()
_syncs: Counter[str] = Counter()
_sync_sites: Counter[str] = Counter()
_transfers = {"h2d_count": 0, "h2d_bytes": 0, "d2h_count": 0, "d2h_bytes": 0}
_float64 = Counter[str]()
# CUDA APIs the program tried: (api, file, line) -> count.
_cuda: Counter[tuple[str, str, int]] = Counter()
_quiet = threading.local()
# Ops per optimizer step: op totals at each step's end (torch.optim step hooks).
_step_ends: list[int] = []
_steps = Counter[str]()
MAX_STEPS = 10_000


def is_internal(filename: str) -> bool:
    """True for frames of torch itself, of the emulators and of the import machinery."""
    return filename.startswith((_TORCH_DIR, *_OUR_DIRS, "<frozen"))


def user_frame() -> tuple[str, int]:
    """``(file, line)`` of the innermost frame outside torch and the emulator."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if not is_internal(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


def call_site() -> str:
    """Return ``file:line`` of the innermost frame outside torch and the emulator.

    Sync sites are what a user must fix, so frames of torch itself (printing,
    autograd) and of this package are skipped.
    """
    filename, line = user_frame()
    return f"{filename}:{line}" if line else filename


class quiet:
    """Context manager that stops syncs from being counted.

    Printing a tensor calls ``tolist()`` and friends internally; it should count
    as one sync at the user's ``print``, not as many inside torch.
    """

    def __enter__(self) -> None:
        _quiet.depth = getattr(_quiet, "depth", 0) + 1
        if state.native is not None:
            state.native.quiet(1)

    def __exit__(self, *exc: object) -> None:
        _quiet.depth -= 1
        if state.native is not None:
            state.native.quiet(-1)


def is_quiet() -> bool:
    """True while inside :class:`quiet` on this thread."""
    return getattr(_quiet, "depth", 0) > 0


def record_op(name: str, float64: bool) -> None:
    """Count one dispatched op (and whether it touched float64)."""
    if is_quiet():
        return
    with _lock:
        _ops[name] += 1
        if float64:
            _float64[name] += 1


def record_sync(kind: str) -> None:
    """Count one host sync of ``kind`` at the user's call site."""
    if is_quiet():
        return
    site = call_site()
    with _lock:
        _syncs[kind] += 1
        _sync_sites[site] += 1


def record_transfer(direction: str, nbytes: int) -> None:
    """Count one host-to-device (``h2d``) or device-to-host (``d2h``) copy."""
    if is_quiet():
        return
    with _lock:
        _transfers[f"{direction}_count"] += 1
        _transfers[f"{direction}_bytes"] += int(nbytes)


def record_cuda(api: str) -> None:
    """Count one attempted use of CUDA (``api``) at the user's call site.

    Not silenced by :class:`quiet`: a CUDA call is the program's however it is reached.
    """
    filename, line = user_frame()
    with _lock:
        _cuda[(api, filename, line)] += 1


def record_optimizer_step(*_: Any) -> None:
    """Mark the end of one optimizer step (a global ``torch.optim`` post-step hook)."""
    native = state.native.ops_total() if state.native is not None else 0
    with _lock:
        _steps["optimizer"] += 1
        _step_ends.append(sum(_ops.values()) + native)
        del _step_ends[:-MAX_STEPS]


def _native_counts() -> tuple[Counter[str], Counter[str], dict[str, int]]:
    """The native backend's ops, float64 ops and host-to-device transfers (counted in C++)."""
    ops, float64 = Counter[str](), Counter[str]()
    if state.native is None:
        return ops, float64, {}
    for name, (calls, f64) in state.native.op_counts().items():
        ops[name] += calls
        if f64:
            float64[name] += f64
    count, nbytes = state.native.h2d()
    return ops, float64, {"h2d_count": count, "h2d_bytes": nbytes}


def counters() -> dict[str, Any]:
    """Return a snapshot of all counters as plain JSON-ready data."""
    native_ops, native_float64, native_h2d = _native_counts()
    with _lock:
        ends = [0, *_step_ends] if _steps["optimizer"] <= MAX_STEPS else _step_ends
        ops, float64 = _ops + native_ops, _float64 + native_float64
        transfers = {k: v + native_h2d.get(k, 0) for k, v in _transfers.items()}
        return {
            "emulator_backend": state.backend,
            "emulator_backend_reason": state.reason,
            # ops_per_step[i]: ops from the end of step i-1 (or reset) to the end of step i.
            "optimizer_steps": _steps["optimizer"],
            "ops_per_step": [b - a for a, b in itertools.pairwise(ends)],
            "ops": sum(ops.values()),
            "ops_by_name": dict(ops),
            "host_syncs": sum(_syncs.values()),
            "host_syncs_by_kind": dict(_syncs),
            "host_sync_sites": dict(_sync_sites),
            **transfers,
            "float64_ops": sum(float64.values()),
            "float64_ops_by_name": dict(float64),
            "cuda_calls": sum(_cuda.values()),
            "cuda_call_sites": [
                {"api": api, "file": filename, "line": line, "count": count}
                for (api, filename, line), count in sorted(_cuda.items())
            ],
        }


def reset() -> None:
    """Zero every counter (e.g. after warm-up, to measure one step)."""
    if state.native is not None:
        state.native.reset_counts()
    with _lock:
        _ops.clear()
        _syncs.clear()
        _sync_sites.clear()
        _float64.clear()
        _cuda.clear()
        _step_ends.clear()
        _steps.clear()
        for key in _transfers:
            _transfers[key] = 0
