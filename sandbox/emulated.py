"""The emulated ``tpu`` or ``neuron`` device of this process: activate it, ask which.

``activate("neuron", devices=2)`` makes ``torch.device("neuron:1")``, ``x.to("neuron")``,
``torch.accelerator.*`` and training loops work in this process, with every op
computed by torch's CPU kernels, so a ported program can be run and compared
with its CPU run here, on machines that have neither device. It chooses between the two
emulators: the native one (sandbox/native) and the Python one (sandbox/emulator), which
share the device's state, counters and arithmetic (sandbox/emulator). Choosing lives here,
above both, so neither emulator's package imports the other's.
"""

from __future__ import annotations

import torch

from . import matmul_precision as _matmul_precision
from . import native
from .emulator import attention, autocast, factories, precision, rnn_cells, state
from .emulator import backend as _backend
from .emulator.counters import counters, reset
from .emulator.tensor import EmulatedTensor
from .modes import EMULATED, GENERIC, DeviceNames, names_problem, torch_problem
from .native import register as native_register

__all__ = ["EmulatedTensor", "activate", "active_backend", "active_device", "counters", "reset"]

SUPPORTED = EMULATED


def activate(
    name: str = "tpu",
    devices: int = 1,
    backend: str | None = None,
    *,
    build: bool = False,
    matmul_precision: str | None = None,
    names: DeviceNames | None = None,
) -> torch.device:
    """Install the emulated device ``name`` on a host of ``devices``; return ``name:0``.

    A ``tpu`` process sees one of them, ``tpu:0``, as on TorchTPU (``state.PER_PROCESS``);
    a ``neuron`` process sees all ``devices`` ordinals.

    ``backend``: ``"native"`` (the C++ PrivateUse1 backend, at about CPU speed),
    ``"python"`` (the tensor-subclass emulator) or ``"auto"``; None reads
    ``$TORCHPORT_EMULATOR`` (default ``auto``: native when its library is at hand, see
    ``native.choose``). Only ``build=True`` compiles it here (a minute of CPU, once per
    torch version); torchport builds it in its own process before a sandboxed run
    (``native.prepare_for_sandbox``), and a run never compiles. PrivateUse1
    can be renamed once per process, so activation is permanent; calling again with
    the same arguments is a no-op. ``matmul_precision`` pins every float32 matmul-class
    op's precision for the process (``sandbox.matmul_precision``; None: the program's
    settings decide, as on TorchTPU). ``names``: the generic mode's device under a target's
    own names (``sandbox.modes.DeviceNames``); the device is then ``names.device``.
    """
    if name not in SUPPORTED:
        raise ValueError(f"unsupported device {name!r}; expected one of {SUPPORTED}")
    if names is not None:
        if name != GENERIC:
            raise ValueError(f"only the {GENERIC!r} mode's device takes a target's own names")
        if problem := names_problem(names) or torch_problem(names.device):
            raise ValueError(f"the emulated device cannot be named so: {problem}")
        name = names.device
    if devices < 1:
        raise ValueError("devices must be at least 1")
    _matmul_precision.check(matmul_precision)
    if state.name:
        asked = (name, devices, matmul_precision, names)
        if (state.name, state.host_count, precision.pinned, state.names) != asked:
            raise RuntimeError(
                f"emulator already active as {state.name} x{state.host_count} "
                f"(matmul_precision={precision.pinned!r}) in this process"
            )
        return torch.device(name, 0)
    current = torch._C._get_privateuse1_backend_name()
    if current != "privateuseone":
        raise RuntimeError(
            f"PrivateUse1 is already taken by backend {current!r}; "
            "run with TORCH_DEVICE_BACKEND_AUTOLOAD=0"
        )
    choice = native.choose(backend, build=build)
    state.names = names
    if choice.backend == "native" and choice.library is not None:
        native_register.register(name, devices, choice.library)
    else:
        _backend.register(name, devices)
        factories.register()
    state.backend, state.reason = choice.backend, choice.reason
    precision.pin(matmul_precision)
    if name == "tpu":  # TorchTPU's matmul arithmetic and its precision settings
        ext = state.native
        precision.enable(ext.set_precision_reduced if ext is not None else None)
        precision.install_torch_settings()
    autocast.register()
    attention.register()
    rnn_cells.register()
    return torch.device(name, 0)


def active_backend() -> tuple[str, str]:
    """Which emulator runs in this process (``native`` / ``python``, "" if none) and why."""
    return state.backend, state.reason


def active_device() -> str | None:
    """Name of the emulated device in this process, or None."""
    return state.name or None
