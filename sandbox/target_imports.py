"""In a target run, the CUDA-only packages torchport itself carries are not importable.

torchport's environment has triton (the ``triton`` extra) so that the REFERENCE run can
execute the original's ``@triton.jit`` kernels in Triton's interpreter
(``sandbox.shim.triton_interpreter``), and bitsandbytes (the ``reference`` extra) so that
it runs an original's 8-bit optimizers on their CPU kernels. The real target has neither:
a port is not to depend on them, and the dependency resolver drops them from what a port
installs (TPP001). So in a run on the emulated device, importing one fails as it does where
it is not installed,
with the reason: a guarded import (``try: import triton ... except ImportError``) takes its
fallback, and a port that still imports or launches a kernel fails here as it would on the
device. Torch's own optional imports of it see it absent too, as on a CPU-only install.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

from . import own_packages

# Top-level packages hidden from target runs, and why the target cannot have them.
HIDDEN = {
    "triton": "Triton kernels compile for NVIDIA and AMD GPUs only",
    # the `reference` extra: its 8-bit optimizers' CPU kernels serve the reference run
    "bitsandbytes": "bitsandbytes' kernels are CUDA-first, with none for the target",
}


class _HidingFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.mode = "the target"

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        top = name.partition(".")[0]
        if top not in HIDDEN or own_packages.hidden(top):
            return None  # a package the program does not name is absent, not refused
        raise ModuleNotFoundError(
            f"No module named {top!r} (torchport: not importable in a run on the emulated "
            f"{self.mode}: {HIDDEN[top]}; torchport has it only to run the original's "
            "code on the reference)",
            name=top,
        )


_FINDER = _HidingFinder()


def install(mode: str) -> None:
    """Hide :data:`HIDDEN` from this process (and, through the session, its children).
    A package already imported stays: call before the program runs."""
    _FINDER.mode = mode
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
