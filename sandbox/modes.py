"""The modes a sandboxed run can start in, named once for the launcher, the harness and
the front doors that choose one, and the names a target's own emulated device answers to."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

# The devices sandbox.emulator provides (PrivateUse1 renamed), each a run mode of its own.
EMULATED = ("tpu", "neuron")
# plain: the program as is; reference: CUDA code on the CPU through the reference shim.
MODES = ("plain", "reference", *EMULATED)
# The emulated mode with no vendor's restrictions: a PrivateUse1 device as torch defines it
# (all of the host's devices in each process, CUDA's autocast lists, gloo collectives).
# TorchNeuron adds nothing the emulator models, so its mode is the generic one, and a target
# whose profile has a device of its own runs in it under that device's names (DeviceNames).
GENERIC = "neuron"

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class DeviceNames:
    """What the generic emulated device answers to for a target that names its own device:
    ``torch.device(device)``, ``init_process_group(backend=dist_backend)``,
    ``torch.compile(backend=compile_backend)``. Travels from the target's profile
    (tools/data/targets.toml) to the sandbox, which knows no profiles."""

    device: str
    dist_backend: str
    compile_backend: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceNames:
        return cls(**{k: str(data[k]) for k in ("device", "dist_backend", "compile_backend")})


def names_problem(names: DeviceNames) -> str | None:
    """Why the emulator cannot take ``names``, or None, read without torch (profiles are
    checked as they load). The emulator also refuses a device torch already has (``cuda``,
    ``xla``, ``meta``...: ``torch_problem``), as PrivateUse1 would be two devices in one."""
    for field, value in names.to_json().items():
        if not _NAME.fullmatch(value):
            return f"{field} {value!r} is not a lowercase name ([a-z][a-z0-9_]*)"
    if names.device in (*MODES, "privateuseone"):
        return f"device {names.device!r} is a run mode's own name"
    return None


def torch_problem(device: str) -> str | None:
    """Why PrivateUse1 cannot be renamed ``device`` in this torch: torch parses it already
    (torch's own rename refuses only some of those, ``cuda`` but not ``xla``)."""
    import torch

    try:
        torch.device(device)
    except RuntimeError:
        return None
    return f"device {device!r} is one torch already has"
