"""The modes a sandboxed run can start in, named once for the launcher, the harness and
the front doors that choose one."""

from __future__ import annotations

# The devices sandbox.emulator provides (PrivateUse1 renamed), each a run mode of its own.
EMULATED = ("tpu", "neuron")
# plain: the program as is; reference: CUDA code on the CPU through the reference shim.
MODES = ("plain", "reference", *EMULATED)
