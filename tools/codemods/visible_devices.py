"""``CUDA_VISIBLE_DEVICES`` becomes the target's device-selection variable (TPD024).

Both runtimes have a variable of the same meaning, read once when the process starts: the
name changes and the value (one chip or a list) stays.

- TorchTPU reads ``TPU_VISIBLE_DEVICES`` (the wheel's ``kTpuVisibleDevicesEnvVar``; the
  variable is the facts' ``[environment] visible_devices``, sandbox/data/torch_tpu.toml).
  ``TPU_VISIBLE_CHIPS`` and the ``*_BOUNDS`` variables are libtpu's, and TorchTPU writes them
  for each process itself from the launch environment (``written_by_torchtpu``): a port that
  set them would fight the runtime, so none is ever emitted.
- TorchNeuron reads ``NEURON_RT_VISIBLE_CORES`` (``"0"``, ``"0,1"``, ``"0-3"``): the same list,
  by NeuronCore.
"""

from __future__ import annotations

import re

import libcst as cst

from ..targets import profile, profiles
from . import torchtpu
from .base import FixContext, Fixed, NotApplicable, fixer

CUDA = "CUDA_VISIBLE_DEVICES"
# CUDA_VISIBLE_DEVICES's counterpart, by target (its profile's visible_devices)
RENAMED = {name: p.visible_devices for name, p in profiles().items() if p.visible_devices}
# why a line is left (text.py's LINE_LEFT says "this form, or ..."): the name is glued to others
LEFT_FOR_TPU = f"a name that is not a whole word: rename it to {RENAMED['tpu']} by hand"
if RENAMED["tpu"] in torchtpu.written_by_torchtpu():  # a wheel that changed its mind
    raise RuntimeError(f"{RENAMED['tpu']} is written by TorchTPU itself; TPD024 cannot set it")


def _renamed(node: cst.SimpleString, name: str) -> cst.SimpleString:
    return node.with_changes(value=f"{node.prefix}{node.quote}{name}{node.quote}")


@fixer("TPD024", set(RENAMED))
def visible_devices(node: cst.CSTNode, ctx: FixContext) -> Fixed:
    """The key renamed wherever it is written or read; its value is the same list."""
    if not isinstance(node, cst.SimpleString):
        raise NotApplicable("not a plain string literal")
    renamed = ctx.profile.visible_devices
    if renamed is None:  # registered for the targets that have one (RENAMED)
        raise NotApplicable(f"{ctx.target} has no counterpart of CUDA_VISIBLE_DEVICES")
    return _renamed(node, renamed)


# -- shell, Make, Dockerfile, YAML, JSON lines ---------------------------------------------


def visible_devices_line(line: str, target: str, path: str) -> str | None:
    """The line for ``target`` (the variable renamed, its value kept), or None."""
    name = profile(target).visible_devices
    if name is None:
        return None
    new = re.sub(rf"\b{CUDA}\b", name, line)
    return None if new == line else new
