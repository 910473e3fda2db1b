"""A GPU generation check spelled through ``torch.cuda.get_device_properties`` (TPD027):
behind ``torch.cuda.is_available()``, which TPD006 turns into
``torch.accelerator.is_available()``, the port reached the CUDA call on the target and
failed ("Torch not compiled with CUDA enabled"); the target now answers the capability as
a modern GPU would, as TPD014 does for a capability branch."""

from __future__ import annotations

import pytest
from golden import migrate_file
from rules_run import migrate_rules_only

PROGRAM = """\
import torch

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fast = False
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.device("cuda"))
            self.fast = (props.major, props.minor) >= (8, 0)
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x), approximate="tanh" if self.fast else "none")


model = Block().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(8, 16, device="cuda")
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_only_a_capability_read_is_rewritten(tmp_path):
    memory = "import torch\nprops = torch.cuda.get_device_properties(0)\nbig = props.total_memory\n"
    named = PROGRAM.replace("self.fast = (", "print(props.name)\n            self.fast = (")
    for source, rewritten in ((PROGRAM, True), (memory, False), (named, False)):
        path = tmp_path / "train.py"
        path.write_text(source)
        out = migrate_file(path, "tpu")
        assert ("types.SimpleNamespace(major=9, minor=0)" in out) is rewritten, out


@pytest.mark.slow
def test_a_generation_check_on_device_properties_verifies_on_tpu(tmp_path):
    final = migrate_rules_only(tmp_path, PROGRAM, "tpu", steps=3)
    assert final["outcome"] == "verified", (final["verification"]["reason"], final["decisions"])
    migrated = (tmp_path / "out" / "train.py").read_text()
    assert "torch.cuda" not in migrated and "import types" in migrated
