"""The legacy alias idiom (TPD021), migrated and run: the original on the reference shim and
its port on the emulated tpu give the same losses, and the port's tensors live where its
model does (a rewrite that forgot ``.to(device)`` leaves them on the CPU and fails the
script's own assertion)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.tools.migrate import MigrateOptions, migrate

_TRAIN = """import numpy as np
import torch
import torch.nn as nn

cuda = True if torch.cuda.is_available() else False
Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

torch.manual_seed(0)
np.random.seed(0)
model = nn.Sequential(nn.Linear(8, 1), nn.Sigmoid())
if cuda:
    model.cuda()
loss_fn = nn.BCELoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.rand(4, 16, 8, dtype=torch.float64)
for step in range(4):
    x = data[step].type(Tensor)
    valid = Tensor(x.shape[0], 1).fill_(1.0)
    noise = Tensor(np.random.normal(0, 0.1, (x.shape[0], 8)))
    weight = next(model.parameters())
    assert x.device == valid.device == noise.device == weight.device, (x.device, weight.device)
    assert x.dtype == valid.dtype == noise.dtype == torch.float32
    loss = loss_fn(model(x + noise), valid)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, "loss", loss.item())
"""


@pytest.mark.slow
def test_an_alias_used_as_constructor_and_cast_target_verifies_on_tpu(tmp_path: Path) -> None:
    original = tmp_path / "original"
    original.mkdir()
    (original / "train.py").write_text(_TRAIN)
    port = tmp_path / "port"
    result = migrate(original, MigrateOptions(target="tpu", out=port))
    assert not [f for f, _ in result.unapplied if f.rule == "TPD021"], result.unapplied
    text = (port / "train.py").read_text()
    assert "torch.cuda" not in text
    assert 'tensor_device = "tpu" if cuda else "cpu"' in text
    assert "x = data[step].type(Tensor).to(tensor_device)" in text
    budget = RunLimits(steps=4, timeout_s=180, memory_mb=2048)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", budget, None)
    assert reference["status"] == "ok" and len(reference["losses"]) == 4, reference
    assert (v.verdict, v.parity.steps) == ("verified", 4), v.reason
