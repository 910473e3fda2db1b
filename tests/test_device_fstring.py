"""TPD002 on an f-string without a replacement field (``torch.device(f"cuda")``): it is the
plain string ``"cuda"``, so the port renames it like one; it was left for a human ("not a CUDA
device string"), and the tpu port then asked a CPU torch for CUDA at its first tensor."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.codemods import migrate_python
from torchport.tools.scanner import ScanOptions, scan

PROGRAM = """\
import torch


def dev():
    if torch.cuda.is_available():
        return torch.device(f"cuda")
    return torch.device("cpu")


def ranked(rank):
    return torch.device(f"cuda:{rank}")
"""
EXPECTED = {"tpu": 'torch.device("tpu")', "neuron": 'torch.device("neuron")'}


@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_a_plain_fstring_device_is_renamed_like_a_string(tmp_path: Path, target: str):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM, encoding="utf-8")
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    result = migrate_python(PROGRAM, findings, target, path.name)
    assert f"        return {EXPECTED[target]}\n" in result.source, result.source
    assert 'f"cuda"' not in result.source
    assert not [f for f, _ in result.unapplied if f.rule == "TPD002"], result.unapplied
