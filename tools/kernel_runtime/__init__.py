"""Runtimes that torchport ships inside a port, for kernels the target cannot compile.

``triton_on_torch`` is copied verbatim into a port (it imports nothing of torchport);
``support`` is torchport's static check of what it covers. ``cudacpu_host`` builds and
calls a CUDA extension's host translation (``cuda_host`` writes it, beside the runtime of
torchport's CPU runner for CUDA kernels joined into ``cudacpu_runtime.h`` / ``.cpp``).
``SHIPPED`` is what a fix may ship (``FixContext.ship``): the migration adds each such
file, read from here, beside the file whose fix asked for it.
"""

from __future__ import annotations

import functools
from pathlib import Path

SHIPPED = (  # files a port may carry: of this folder, or joined by cuda_host
    "triton_on_torch.py",
    "cudacpu_host.py",
    "cudacpu_runtime.h",
    "cudacpu_runtime.cpp",
)


@functools.cache
def shipped(name: str) -> str:
    """The text of ``name``, a file of ``SHIPPED``, as the port carries it (verbatim)."""
    if name not in SHIPPED:
        raise ValueError(f"{name} is not a file torchport ships")
    if name.startswith("cudacpu_runtime."):
        from . import cuda_host  # the CPU runner's runtime, joined: read only when shipped

        return cuda_host.runtime_header() if name.endswith(".h") else cuda_host.runtime_source()
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


def is_shipped_copy(name: str, data: bytes) -> bool:
    """Whether ``data``, a file called ``name``, is one torchport shipped, unchanged: the
    scan leaves it out (torchport's code, not the repository's to port)."""
    return name in SHIPPED and data == shipped(name).encode("utf-8")
