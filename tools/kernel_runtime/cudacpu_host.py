"""Shipped by torchport: builds a CUDA extension's host translation and calls it on the CPU.

torchport translated the extension's CUDA C++ into host C++ (the ``*_host.cpp`` file beside
this one, whose header says what changed), so the kernels build with the host compiler and
run on the CPU wherever the port runs. ``build`` compiles that file (optimised, ``-O2``) with
``cudacpu_runtime.cpp`` (the launch loop and fibers) through torch's own
``cpp_extension.load``; each function of the module it returns takes tensors on any
device: they are copied to the CPU (``.cpu()``), the kernels run there, and tensors that
come back are copied to the device of the call's first tensor (``.to(device)``). Correct,
but every call pays both copies and runs the kernels on the host CPU: a PyTorch version of
the call site is the fast port.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
from torch.utils import cpp_extension

RUNTIME_SOURCE = "cudacpu_runtime.cpp"


def build(name: str, source: str, beside: str, **kwargs: Any) -> HostExtension:
    """Build ``source`` (a file in the folder of ``beside``, the calling module's
    ``__file__``) as the extension ``name``; ``kwargs`` go to ``cpp_extension.load``."""
    folder = os.path.dirname(os.path.abspath(beside))
    module = cpp_extension.load(
        name=name,
        sources=[os.path.join(folder, source), os.path.join(folder, RUNTIME_SOURCE)],
        extra_cflags=["-O2", *kwargs.pop("extra_cflags", [])],
        extra_include_paths=[folder, *kwargs.pop("extra_include_paths", [])],
        **kwargs,
    )
    return HostExtension(module)


def _device(values: Any) -> torch.device | None:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, list | tuple):
            found = _device(value)
            if found is not None:
                return found
    return None


def _moved(value: Any, device: torch.device | str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_moved(v, device) for v in value)
    return value


class HostExtension:
    """The built module, whose functions take and give tensors on the caller's device."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def __getattr__(self, attr: str) -> Any:
        found = getattr(self.module, attr)
        if not callable(found):
            return found

        @functools.wraps(found)
        def on_host(*args: Any, **kwargs: Any) -> Any:
            device = _device([*args, *kwargs.values()])
            args = _moved(args, "cpu")
            kwargs = {k: _moved(v, "cpu") for k, v in kwargs.items()}
            out = found(*args, **kwargs)
            return out if device is None else _moved(out, device)

        return on_host
