"""The CUDA→CPU reference shim: run an unmodified CUDA PyTorch program on a CPU-only torch.

The verifier compares a port against the ORIGINAL program's numbers; this shim is what
lets the original run here at all, as close as possible to what it computes on a GPU in
fp32: CUDA devices map to the CPU, `torch.cuda` answers like a machine with idle GPUs (2
by default), AMP is off, NCCL becomes gloo, and every CUDA API the program touched is
recorded with its call site (`intercepted()`), which is runtime evidence of what a port
has to change. CUDA C++ extensions (`load_inline`, `load`) are built for the CPU by
torchport's CPU runner for CUDA kernels (`cuda_extensions`, `sandbox.cudacpu`).

    from torchport.sandbox import shim
    shim.activate()
    ...  # CUDA code runs on the CPU
    shim.intercepted()  # [{"api": "Tensor.cuda", "file": ..., "line": 12, "count": 20}, ...]

Or run a program: `python -m torchport.sandbox.shim train.py --epochs 1`.
"""

from __future__ import annotations

from .. import patching
from . import (
    amp,
    backends,
    cuda_api,
    cuda_extensions,
    devices,
    distributed,
    graphs,
    recording,
)

__all__ = ["activate", "deactivate", "intercepted", "is_active", "reset_intercepted"]

_active = False


def activate(gpus: int = 2) -> None:
    """Install the shim in this process (idempotent), answering for ``gpus`` GPUs.
    Enter it on the main thread.

    The device-mapping TorchFunctionMode is per thread: threads started later by the
    program that create CUDA tensors themselves are not covered.
    """
    global _active
    if _active:
        return
    cuda_api.install(gpus)
    graphs.install()
    backends.install()
    amp.install()
    distributed.install()
    cuda_extensions.install()
    devices.install()
    _active = True


def deactivate() -> None:
    """Undo `activate()`: every patched torch attribute gets its original value back."""
    global _active
    if not _active:
        return
    devices.uninstall()
    distributed.uninstall()
    patching.undo_all("shim")
    _active = False


def is_active() -> bool:
    """Whether `activate()` is in effect."""
    return _active


def intercepted() -> list[dict[str, object]]:
    """Every CUDA API intercepted so far: api, file, line (user code) and count."""
    return recording.intercepted()


def reset_intercepted() -> None:
    """Forget the interceptions recorded so far."""
    recording.reset()
