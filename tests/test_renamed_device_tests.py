"""Every string test of a device name follows the name's rename (issue 31): a port that
renames ``"cuda"`` to ``"tpu"`` but leaves ``device.startswith("cuda")`` makes the test False
on the target, so autocast, fused optimizers and the timing sync silently turn off. The
ported function is run with the name the target's device has and must take the device arm.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

PROGRAM = """\
import torch


def device_kind(device: str) -> str:
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    return device_type


def indexed(device: str) -> bool:
    if str(device).startswith("cuda:"):
        return True
    return False


def fast_path(device: str) -> bool:
    use_amp = "cuda" in device and not device.startswith("cuda")
    return device.startswith("cuda") or use_amp
"""
# what str(device) reads on each target's device (the accelerator target: any accelerator)
NAME = {"tpu": "tpu:0", "neuron": "neuron:0", "xla": "xla:0", "accelerator": "xpu:0"}


def migrate(tmp_path: Path, source: str, target: str):
    path = tmp_path / "prog.py"
    path.write_text(source, encoding="utf-8")
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_python(source, findings, target, path.name)


def run(source: str) -> dict:
    namespace: dict = {}
    source = source.replace("import torch_xla\n", "")  # xla's device type registration
    exec(compile(source, "prog.py", "exec"), namespace)  # the port, as the target runs it
    return namespace


@pytest.mark.parametrize("target", TARGETS)
def test_prefix_tests_follow_the_renamed_device(tmp_path, target):
    result = migrate(tmp_path, PROGRAM, target)
    assert 'startswith("cuda' not in result.source, result.source
    port = run(result.source)
    name = NAME[target]
    if target != "accelerator":  # there the arm asks the machine's accelerator for its type
        assert port["device_kind"](name) == target
    assert port["indexed"](name) is True
    assert port["fast_path"](name) is True
    # and the CPU still takes the CPU arm
    assert port["device_kind"]("cpu") == "cpu"
    assert port["indexed"]("cpu") is False
    assert port["fast_path"]("cpu") is False
    assert migrate(tmp_path, result.source, target).source == result.source


def test_accelerator_prefix_test_asks_not_the_cpu(tmp_path):
    out = migrate(tmp_path, PROGRAM, "accelerator").source
    kind = "torch.accelerator.current_accelerator().type"
    assert f'device_type = {kind} if not device.startswith("cpu") else "cpu"' in out
    assert 'use_amp = "cpu" not in device and device.startswith("cpu")' in out  # no `not not`
    assert 'if not str(device).startswith("cpu"):' in out


MEMBERSHIP = """\
import torch


def on_gpu(x: torch.Tensor) -> bool:
    return x.device.type in ("cuda", "mps")
"""


@pytest.mark.parametrize("target", ["tpu", "neuron", "xla"])
def test_membership_in_device_kinds_follows_the_rename(tmp_path, target):
    out = migrate(tmp_path, MEMBERSHIP, target).source
    assert f'x.device.type in ("{target}", "mps")' in out


def test_membership_on_the_accelerator_target_is_reported_not_rewritten_wrongly(tmp_path):
    """``(current_accelerator() or cpu).type in (..., "mps")`` would be True on a CPU-only
    machine: the finding is left for a human, with the reason."""
    result = migrate(tmp_path, MEMBERSHIP, "accelerator")
    assert result.source == MEMBERSHIP
    (finding, reason), *rest = result.unapplied
    assert not rest and finding.rule == "TPD016"
    assert "membership test in a list of device kinds" in reason


CASE_PATTERN = """\
import torch


def kernel(backend: str, x: torch.Tensor) -> torch.Tensor:
    match backend:
        case "cuda":
            return x.cuda()
    return x
"""


def test_a_case_pattern_is_left_on_the_accelerator_target_and_the_file_still_migrates(
    tmp_path,
):
    """An expression cannot stand in a case pattern: rewriting ``case "cuda":`` as one made
    the whole file fail to compile, so nothing in it was migrated."""
    result = migrate(tmp_path, CASE_PATTERN, "accelerator")
    assert 'case "cuda":' in result.source and "x.cuda()" not in result.source
    compile(result.source, "prog.py", "exec")
    (finding, reason), *rest = result.unapplied
    assert not rest and finding.rule == "TPD002" and "case pattern" in reason
