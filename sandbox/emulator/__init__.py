"""CPU-backed emulation of a TorchTPU (``tpu``) or TorchNeuron (``neuron``) device.

``activate("tpu", devices=2)`` makes ``torch.device("tpu:1")``, ``x.to("tpu")``,
``torch.accelerator.*`` and training loops work in this process, with every op
computed by torch's CPU kernels, so a ported program can be run and compared
with its CPU run here, on machines that have neither device.
"""

from __future__ import annotations

import torch

from ..modes import EMULATED
from . import autocast, backend, factories, rnn_cells, state
from .counters import counters, reset
from .tensor import EmulatedTensor

__all__ = ["EmulatedTensor", "activate", "active_device", "counters", "reset"]

SUPPORTED = EMULATED


def activate(name: str = "tpu", devices: int = 1) -> torch.device:
    """Install the emulated device ``name`` with ``devices`` ordinals; return ``name:0``.

    PrivateUse1 can be renamed once per process, so activation is permanent;
    calling again with the same arguments is a no-op.
    """
    if name not in SUPPORTED:
        raise ValueError(f"unsupported device {name!r}; expected one of {SUPPORTED}")
    if devices < 1:
        raise ValueError("devices must be at least 1")
    if state.name:
        if (state.name, state.count) != (name, devices):
            raise RuntimeError(
                f"emulator already active as {state.name} x{state.count} in this process"
            )
        return torch.device(name, 0)
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone":
        raise RuntimeError(
            f"PrivateUse1 is already taken by backend {current!r}; "
            "run with TORCH_DEVICE_BACKEND_AUTOLOAD=0"
        )
    backend.register(name, devices)
    factories.register()
    autocast.register()
    rnn_cells.register()
    return torch.device(name, 0)


def active_device() -> str | None:
    """Name of the emulated device in this process, or None."""
    return state.name or None
