"""A port that keeps a CUDA-only import (TPP001, left for a human) cannot import at all on the
target: the verdict says so, naming the import, instead of "the original fails here too:
ModuleNotFoundError" (issue 31). The program below uses cupy only in a helper behind a flag,
the way utilities do; the migration leaves the import for a human."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from torchport.agents.unimportable import cuda_only_module
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.cli.main import main as cli

PROGRAM = textwrap.dedent(
    """\
    import sys

    import torch
    import cupy as cp


    def to_host(t):
        return cp.asnumpy(cp.asarray(t))


    model = torch.nn.Linear(4, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()
    for _ in range(3):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if "--dump" in sys.argv:
        print(to_host(model.weight.detach()))
    """
)


def test_cuda_only_libraries_are_known_by_their_modules():
    assert cuda_only_module("apex.amp") == "apex"
    assert cuda_only_module("pycuda.autoinit") == "pycuda"
    assert cuda_only_module("cupy") == "cupy"
    assert cuda_only_module("numpy") is None
    assert cuda_only_module("apexlib") is None


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed here")
def test_the_verdict_says_the_port_cannot_import_its_cuda_only_import(tmp_path: Path):
    source = tmp_path / "repo"
    source.mkdir()
    (source / "train.py").write_text(PROGRAM)
    out = tmp_path / "tpu"
    left_for_a_human = 1
    assert cli(["migrate", str(source), "-t", "tpu", "--llm", "none", "--no-verify", "-q",
                "--out", str(out)]) == left_for_a_human  # fmt: skip
    assert "import cupy as cp" in (out / "train.py").read_text()
    budget = RunLimits(steps=2, timeout_s=120, memory_mb=2048)
    verification, _ = verify_tree(source, out, ["python", "train.py"], "tpu", budget, None)
    assert verification.verdict == "not-runnable"
    reason = verification.reason
    assert reason.startswith("the port cannot import: it keeps `import cupy as cp` (train.py:4)")
    assert "cupy is a CUDA-only library that tpu cannot install" in reason
    assert "guard the import" in verification.next_step
    assert "the original fails here too" not in reason
