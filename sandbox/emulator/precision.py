"""TorchTPU's float32 matmul precision on the emulated device.

A run may pin one precision for every float32 matmul-class op (``RunSpec.matmul_precision``,
``sandbox.matmul_precision``); None leaves the program's own settings in charge.
"""

from __future__ import annotations

from .. import matmul_precision

# The run's pinned torch name ("highest", ...), or None: the program's settings decide.
pinned: str | None = None


def pin(value: str | None) -> None:
    """Pin ``value`` (a torch ``set_float32_matmul_precision`` name) for this process."""
    global pinned
    pinned = matmul_precision.check(value)
