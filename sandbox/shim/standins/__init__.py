"""Reference stand-ins for CUDA-only libraries: flash-attn, xformers, apex.

A program that imports flash-attn, xformers or apex cannot run on a CPU machine at all, so
its original has no reference numbers and a port of it could never be verified. In the
REFERENCE run only (never in an emulated target run: the port must not depend on them),
:func:`install` puts an import hook in place that, when the real package is absent, serves
pure-PyTorch stand-ins implementing each API's documented semantics (these are torchport
code, not the libraries). Each stand-in the program used is recorded; :func:`records`
lists them for the run's result (``reference_standins``).

    from torchport.sandbox.shim import standins
    standins.install()
    import flash_attn  # the stand-in, when flash-attn is not installed
    ...
    standins.records()  # ["flash_attn.flash_attn_func", ...]
"""

from __future__ import annotations

from .finder import STUBS, install, uninstall
from .usage import records, reset

__all__ = ["STUBS", "install", "records", "reset", "uninstall"]
