"""Issue 30's acceptance: a 2-rank ``torchrun`` program run with ``torchport run --target tpu``
(the real CLI, a sandboxed run, behind TorchTPU's launch step as a port's launch line takes it:
``--tpu-launch-step``) that puts rank 1 on ``tpu:1`` fails as on TorchTPU, where each process
sees one device, ``tpu:0``; the same program on ``torch.device("tpu")`` in every rank trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # two torchrun launches of two ranks each (~7 s CPU apiece)

PROGRAM = """\
import sys

import torch
import torch.distributed as dist

dist.init_process_group("tpu")
rank = dist.get_rank()
# --per-rank: a CUDA-style port, rank r on tpu:r; else each rank on its process's device
device = torch.device("tpu", rank) if "--per-rank" in sys.argv else torch.device("tpu")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1).to(device))  # <- device
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(rank)
x = torch.randn(32, 4, generator=gen).to(device)
y = torch.randn(32, 1, generator=gen).to(device)
for step in range(1000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
DEVICE_LINE = next(n for n, t in enumerate(PROGRAM.splitlines(), 1) if "# <- device" in t)


def _run(root: Path, *args: str) -> dict[str, Any]:
    """``torchport run --target tpu --tpu-launch-step -f json -- torchrun --nproc_per_node 2
    train.py ARGS``: the launch step first, as ``eval "$(python -m torch.tpu.distributed | sed
    's/^/export /')" && torchrun ...`` (a worker without its variables fails at first use)."""
    command = [sys.executable, "-m", "torchport.cli", "run", "--target", "tpu", "--tpu-launch-step"]
    command += ["--root", str(root), "--steps", "2", "--timeout", "180", "-f", "json"]
    command += ["--", "torchrun", "--nproc_per_node", "2", "train.py", *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400, env=os.environ)
    assert proc.stdout.strip(), proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rank-device")
    (root / "train.py").write_text(PROGRAM)
    return root


def test_rank_one_on_tpu_1_fails_with_torchtpus_ordinal_error(program: Path) -> None:
    result = _run(program, "--per-rank")
    assert result["status"] == "failed"
    error = result["error"]  # the run's cause is rank 1's, not its killed peer's
    assert (error["rank"], error["type"]) == (1, "RuntimeError"), error
    assert error["message"].startswith("tpu error: invalid device ordinal 1 (a TorchTPU process")
    assert (error["frame"]["file"], error["frame"]["line"]) == ("train.py", DEVICE_LINE)
    rank1 = next(r for r in result["ranks"] if r["rank"] == 1)
    assert rank1["status"] == "failed" and rank1["error"]["message"] == error["message"]


def test_each_rank_on_its_process_device_trains(program: Path) -> None:
    # Behind the launch step each rank's first use of its process's device succeeds.
    result = _run(program)
    ranks = {r["rank"]: r for r in result["ranks"]}
    assert set(ranks) == {0, 1}, result["ranks"]
    assert result["status"] == "ok", result["error"]
    assert all(r["status"] == "ok" and r["error"] is None for r in ranks.values()), ranks
    assert result["steps"] == 2, result
