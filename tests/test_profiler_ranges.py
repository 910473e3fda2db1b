"""Nsight capture ranges (TPT006, TPT007): the original runs on the reference shim, where
they record nothing, and the port without them verifies against it. The rewrites
themselves are golden files (tests/fixtures/golden/TPT00{6,7}*.py)."""

from __future__ import annotations

import pytest
from rules_run import migrate_rules_only

PROFILED = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    if step == 2:
        torch.cuda.profiler.start()
    with torch.cuda.profiler.profile(), torch.autograd.profiler.emit_nvtx():
        x = torch.randn(16, 8).cuda()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
    opt.step()
    if step == 3:
        torch.cuda.profiler.stop()
"""


@pytest.mark.slow
@pytest.mark.parametrize("target", ["tpu", "neuron"])
def test_a_program_with_capture_ranges_verifies_without_them(tmp_path, target):
    final = migrate_rules_only(tmp_path, PROFILED, target)
    assert final["outcome"] == "verified", final["verification"]["reason"]
    assert final["verification"]["parity"]["max_abs"] == 0
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "profiler" not in migrated and "nvtx" not in migrated
    assert "    loss.backward()\n    opt.step()\n" in migrated  # the block's body, dedented
