"""Verdicts when the original itself fails, on real sandboxed pairs of runs.

The original (CUDA, on the reference shim) and its port (tpu, on the emulator)
differ only in the device string, so both fail at the same line when they fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.agents.verifier import RunLimits, verify_tree
from verification_md import verification_md

_TRAIN = """import torch
device = torch.device("{device}")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4).to(device), torch.randn(8, 1).to(device)
for step in range(5):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1:
        raise RuntimeError("cannot save: weights_only")
"""
_BUDGET = RunLimits(steps=5, timeout_s=120, memory_mb=2048)


def _pair(tmp_path: Path, source: str) -> tuple[Path, Path]:
    trees = []
    for name, device in (("original", "cuda"), ("port", "tpu")):
        root = tmp_path / name
        root.mkdir()
        (root / "train.py").write_text(source.format(device=device))
        trees.append(root)
    return trees[0], trees[1]


@pytest.mark.slow
def test_two_matching_steps_then_the_same_failure_verify_with_a_caveat(tmp_path: Path) -> None:
    original, port = _pair(tmp_path, _TRAIN)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    assert reference["status"] == "failed" and len(reference["losses"]) == 2, reference
    assert (v.verdict, v.parity.steps) == ("verified", 2), v.reason
    caveat = "both runs then fail the same way at train.py:13: RuntimeError: cannot save"
    assert v.caveat.startswith(caveat) and v.reason.startswith("2 steps match the original")
    text = verification_md(v)
    assert text.startswith("# Verification: verified (with a caveat)\n")
    assert "- caveat: both runs then fail the same way" in text


@pytest.mark.slow
def test_an_original_that_fails_at_import_is_not_runnable(tmp_path: Path) -> None:
    original, port = _pair(tmp_path, "import not_installed_anywhere\n" + _TRAIN)
    v, _ = verify_tree(original, port, ["python", "train.py"], "tpu", _BUDGET, None)
    assert v.verdict == "not-runnable"
    assert v.reason.startswith(
        "the original fails here too: train.py:1: ModuleNotFoundError: "
        "No module named 'not_installed_anywhere'"
    )
    assert verification_md(v).startswith(
        "# Verification: not-runnable (the original fails here too)"
    )
