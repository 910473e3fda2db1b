"""A 2-rank ``SyncBatchNorm`` program whose device lacks an operator: the verification's
reason names the exception and the operator, end to end.

The program is what a self-supervised training repository does (``mp.spawn``, one
process per GPU, ``convert_sync_batchnorm``, DDP). SyncBatchNorm's training path across
two ranks calls ``torch.batch_norm_stats``, which torch implements for accelerators only.
On ``tpu`` the emulated device refuses it with TorchTPU's own missing-op error, as the
torch-tpu wheel has no kernel for it (sandbox/data/torch_tpu.toml, [device_only_ops]):
the port's failure on the real device too. On ``neuron`` the emulator brings its own
kernel (sandbox/device_only_ops.py), so to fail as a device without it would, the
program drops that kernel there (the one place this test reaches into torchport); torch
then fails naming the 'CPU' backend, and the rank's traceback, which reaches the parent
as ``mp.spawn``'s ProcessRaisedException, follows the exception line with torch's list
of dispatch keys, each of which reads like an exception line: the reason used to be one
of those.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_emulator
from test_emulator import backend_env

backend = test_emulator.backend  # the fixture: each test runs on both emulators

PROGRAM = '''
"""A tiny SimSiam-style self-supervised run on 2 GPUs: SyncBatchNorm, DDP, mp.spawn."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def encoder():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 16),
    )


def lose_batch_norm_stats():
    """On neuron the device lacks batch_norm_stats: drop the emulator's kernel for it."""
    if not hasattr(torch, "neuron"):
        return  # the CUDA reference, or tpu (whose emulated device refuses it already)
    from torchport.sandbox import device_only_ops
    from torchport.sandbox.native import register
    device_only_ops.KERNELS.pop(torch.ops.aten.batch_norm_stats.default)  # Python emulator
    for library in register._LIBRARIES:  # the native emulator's registrations of them
        library._destroy()


def worker(rank, world_size):
    lose_batch_norm_stats()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(encoder()).cuda(rank)
    model = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(4):
        x = torch.randn(8, 3, 8, 8, generator=g).cuda(rank)
        a, b = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
        za, zb = model(a), model(b)
        loss = -(F.normalize(za, dim=1) * F.normalize(zb.detach(), dim=1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
'''

OP = "aten::batch_norm_stats"
# target -> (the exception of the reason's last line, the diagnosis's signature).
EXPECTED = {
    "tpu": (
        "ProcessRaisedException: NotImplementedError: 'aten::batch_norm_stats' is not"
        " implemented for TPU. Please file a feature request",
        "torchtpu-op-missing",
    ),
    "neuron": (
        "ProcessRaisedException: NotImplementedError: Could not run 'aten::batch_norm_stats'",
        "emulator-op-missing-cpu-kernel",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(EXPECTED))
def test_the_reason_names_the_exception_and_the_missing_operator(
    tmp_path: Path, backend: str, target: str
) -> None:
    source = tmp_path / "ssl"
    source.mkdir()
    (source / "train.py").write_text(PROGRAM)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torchport.cli", "migrate", str(source)),
            *("--target", target, "--out", str(out), "--llm", "none", "--exit-zero"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **backend_env(backend), "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    exception, signature = EXPECTED[target]
    report = out / "torchport-report"
    record = json.loads((report / "verification.json").read_text())
    verification = record["verification"]
    assert record["verdict"] == "failed", verification["reason"]
    reason = verification["reason"]
    last = reason.splitlines()[-1]
    # The exception and the operator, not a frame or a dispatch key of torch's list.
    assert exception in last, reason
    assert 'File "' not in reason and "registered at" not in reason, reason
    assert "torchport-run-" not in reason and str(tmp_path) not in reason, reason
    # The diagnosis knows it: an operator the device lacks, not "unknown".
    diagnoses = [d for d in record["decisions"] if d["node"] == "diagnose"]
    assert [d["signature"] for d in diagnoses] == [signature], diagnoses
    assert OP in diagnoses[0]["why"]
    # The markdown report says the same, and the JSON keeps the rank's whole traceback.
    markdown = (report / "verification.md").read_text()
    why = next(line for line in markdown.splitlines() if line.startswith("- why:"))
    assert "aten::batch\\_norm\\_stats" in why and "NotImplementedError" in why, why
    error = verification["target"]["error"]
    assert len(error["message"]) <= 2000
    full = error["full_message"]
    assert "Traceback (most recent call last):" in full and "in worker" in full
    assert OP in full and "batch_norm_stats(input, eps)" in full  # torch's own frame
