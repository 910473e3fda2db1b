"""The child process that compiles the native emulator (``build.py`` starts it).

A module of its own because it imports torch and the registration, which the builder's
parent must not: loading the library registers a PrivateUse1 backend in that process.

    python -m torchport.sandbox.native.compile FOLDER
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from torch.utils import cpp_extension

from .build import MODULE, SOURCE
from .register import ROUTED, routed_ops


def compile_into(folder: Path) -> None:
    """Compile SOURCE into ``folder/torchport_emulator.so``, with the routed-ops list."""
    dense, sparse = routed_ops()  # before loading the library, which registers kernels
    (folder / ROUTED).write_text(json.dumps({"dense": dense, "sparse": sparse}), encoding="utf-8")
    cpp_extension.load(
        name=MODULE,
        sources=[str(SOURCE)],
        build_directory=str(folder),
        extra_cflags=["-O2"],
        verbose=False,
    )


if __name__ == "__main__":
    compile_into(Path(sys.argv[1]))
