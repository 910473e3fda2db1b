"""The generic emulated device under a target's own names (sandbox.modes.DeviceNames): what
a fifth target's profile needs for its port to run, on both emulator backends, and what the
emulator and the harness refuse before a program could run on a device torch already has."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_emulator import backend, run_snippet  # noqa: F401  (the fixture)
from torchport.sandbox.harness import RunError, RunSpec
from torchport.sandbox.modes import GENERIC, DeviceNames, names_problem, torch_problem

FPX = DeviceNames(device="fpx", dist_backend="fpxccl", compile_backend="fpxc")

ON_FPX = f"""
from torchport.sandbox.modes import DeviceNames
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
device = emu.activate({GENERIC!r}, devices=2, names=DeviceNames(**{FPX.to_json()!r}))
result["device"] = str(device)
result["accelerator"] = str(torch.accelerator.current_accelerator())
result["count"] = torch.accelerator.device_count()
model = torch.nn.Linear(4, 2).to("fpx:1")
x = torch.randn(3, 4).to("fpx:1")
with torch.autocast("fpx", dtype=torch.bfloat16):
    y = model(x)
result["autocast"] = [str(y.dtype), str(y.device)]
compiled = torch.compile(model, backend="fpxc")
result["compiled_is_eager"] = compiled is model
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29700 + os.getpid() % 200),
                  RANK="0", WORLD_SIZE="1")
dist.init_process_group(backend="fpxccl")
t = torch.full((2,), 3.0, device="fpx")
dist.all_reduce(t)
result["all_reduce"] = [t.tolist(), str(t.device), dist.get_backend()]
result["neuron_backend"] = "neuron" in dist.Backend.backend_list
dist.destroy_process_group()
"""


def test_the_generic_device_answers_to_a_targets_own_names(backend):  # noqa: F811
    got = run_snippet(ON_FPX, activate=False, backend=backend)
    assert got["device"] == "fpx:0" and got["accelerator"] == "fpx"
    assert got["count"] == 2  # the generic device: a process sees all of the host's
    assert got["autocast"] == ["torch.bfloat16", "fpx:1"]
    assert got["compiled_is_eager"] is True
    assert got["all_reduce"] == [[3.0, 3.0], "fpx:0", "fpxccl"]
    assert got["neuron_backend"] is False  # the mode's own name is not the target's


@pytest.mark.parametrize(
    "mode, names, message",
    [
        ("tpu", FPX, "only the 'neuron' mode's device takes a target's own names"),
        (GENERIC, DeviceNames("xla", "xla", "xla"), "device 'xla' is one torch already has"),
        (GENERIC, DeviceNames("fpx", "fpx-ccl", "fpxc"), "dist_backend 'fpx-ccl' is not"),
        (GENERIC, DeviceNames("tpu", "tpu", "tpu"), "device 'tpu' is a run mode's own name"),
    ],
)
def test_the_emulator_refuses_names_it_cannot_take(mode, names, message):
    code = (
        "from torchport.sandbox import emulated\nfrom torchport.sandbox.modes import DeviceNames\n"
        f"emulated.activate({mode!r}, names=DeviceNames(**{names.to_json()!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and message in proc.stderr


def test_the_names_are_read_without_torch_and_torchs_own_devices_with_it():
    assert names_problem(FPX) is None and torch_problem("fpx") is None
    assert names_problem(DeviceNames("Fpx", "f", "f")) is not None
    assert torch_problem("cuda") and torch_problem("meta") and torch_problem("mps")


def test_the_harness_takes_a_targets_names_in_the_generic_mode_only(tmp_path: Path):
    with pytest.raises(RunError, match="a device of a target's own runs in mode neuron"):
        RunSpec(root=tmp_path, command=["python", "x.py"], mode="tpu", names=FPX)
    with pytest.raises(RunError, match="is not a lowercase name"):
        RunSpec(tmp_path, ["python", "x.py"], mode=GENERIC, names=DeviceNames("f", "F", "f"))
    assert RunSpec(tmp_path, ["python", "x.py"], mode=GENERIC, names=FPX).names == FPX
