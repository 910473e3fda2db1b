"""Runtimes that torchport ships inside a port, for kernels the target cannot compile.

``triton_on_torch`` is copied verbatim into a port (it imports nothing of torchport);
``support`` is torchport's static check of what it covers. ``SHIPPED`` is what a fix may
ship (``FixContext.ship``): the migration adds each such file, read from here, beside the
file whose fix asked for it.
"""

from __future__ import annotations

import functools
from pathlib import Path

SHIPPED = ("triton_on_torch.py",)  # files of this folder a port may carry


@functools.cache
def shipped(name: str) -> str:
    """The text of ``name``, a file of ``SHIPPED``, as the port carries it (verbatim)."""
    if name not in SHIPPED:
        raise ValueError(f"{name} is not a file torchport ships")
    return Path(__file__).with_name(name).read_text(encoding="utf-8")


def is_shipped_copy(name: str, data: bytes) -> bool:
    """Whether ``data``, a file called ``name``, is one torchport shipped, unchanged: the
    scan leaves it out (torchport's code, not the repository's to port)."""
    return name in SHIPPED and data == shipped(name).encode("utf-8")
