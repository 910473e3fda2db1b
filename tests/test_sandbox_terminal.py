"""A program that asks the terminal its size at import runs in the sandbox as on a
terminal (``sandbox.terminal``): the original on the reference shim and its port on the
emulated device."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.sandbox import terminal
from torchport.sandbox.harness import RunSpec, run

# The pattern: a progress-bar module sizes itself from `stty size` when it is imported.
PROGRESS = """\
import os
rows, columns = os.popen("stty size", "r").read().split()
WIDTH, HEIGHT = int(columns), int(rows)
"""
TRAIN = """\
import torch
from progress import HEIGHT, WIDTH
model = torch.nn.Linear(4, 1).{device}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(8, 4).{device}).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("terminal", WIDTH, HEIGHT)
"""


def _program(root: Path, device: str) -> Path:
    root.mkdir()
    (root / "progress.py").write_text(PROGRESS)
    (root / "train.py").write_text(TRAIN.format(device=device))
    return root


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "device"), [("reference", "cuda()"), ("tpu", 'to("tpu")')])
def test_stty_size_at_import_answers_as_a_terminal(tmp_path, mode, device):
    root = _program(tmp_path / mode, device)
    result = run(RunSpec(root=root, command=["python", "train.py"], mode=mode, steps=5))
    assert result.status == "ok" and result.steps == 3, (result.error, result.stderr_tail)
    assert "terminal 80 24" in result.stdout_tail


def test_the_stand_in_answers_size_and_hands_the_rest_to_the_system_stty(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", os.environ.get("PATH", os.defpath))
    monkeypatch.setenv("COLUMNS", "132")  # the program's own setting wins
    monkeypatch.setenv("LINES", "")  # restored after the test, whatever answer() sets
    monkeypatch.delenv("LINES")
    where = terminal.answer(tmp_path)
    assert os.environ["PATH"].split(os.pathsep)[0] == str(where)
    size = subprocess.run(["stty", "size"], stdin=subprocess.DEVNULL, capture_output=True)
    assert size.stdout.decode().split() == ["24", "132"]
    other = subprocess.run(["stty", "-a"], stdin=subprocess.DEVNULL, capture_output=True)
    assert other.returncode != 0  # as without a terminal: only the size is answered
    assert sys.executable in (where / "stty").read_text().splitlines()[0]
