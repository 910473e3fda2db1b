"""Runtimes that torchport ships inside a port, for kernels the target cannot compile.

``triton_on_torch`` is copied verbatim into a port (it imports nothing of torchport);
``support`` is torchport's static check of what it covers. ``SHIPPED`` is what a fix may
ship (``FixContext.ship``): the migration adds each such file, read from here, beside the
file whose fix asked for it.
"""

from __future__ import annotations

from pathlib import Path

SHIPPED = ("triton_on_torch.py",)  # files of this folder a port may carry


def shipped(name: str) -> str:
    """The text of ``name``, a file of ``SHIPPED``, as the port carries it (verbatim)."""
    if name not in SHIPPED:
        raise ValueError(f"{name} is not a file torchport ships")
    return Path(__file__).with_name(name).read_text(encoding="utf-8")
