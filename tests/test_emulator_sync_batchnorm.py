"""``torch.nn.SyncBatchNorm`` across two ranks on the emulated device, both emulators.

SyncBatchNorm runs ops torch has for accelerators only (``batch_norm_stats``,
``batch_norm_gather_stats_with_counts``, ``batch_norm_elemt``, the backward pair) and
gathers its statistics with ``all_gather_single`` into a ``(1, world * n)`` tensor,
which gloo alone refuses. The emulator brings the ops (sandbox/device_only_ops.py) and
the flat gather (emulator/process_group.py) on ``neuron``. The check: each rank's losses,
gradients and running statistics equal one CPU process training the same net, with plain
batch norm, on both ranks' batches together (what synchronised statistics mean). On
``tpu`` the same program fails as TorchTPU 0.2.0 would: its wheel has no kernel for these
ops (sandbox/data/torch_tpu.toml, [device_only_ops]).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_emulator
import torch
from test_emulator import backend_env
from torchport.sandbox import device_only_ops, launch_step, torchtpu_facts, tpu_launch

backend = test_emulator.backend  # the fixture: each test runs on both emulators

SCRIPT = """
import json, sys
import torch, torch.nn as nn, torch.distributed as dist
import torchport.sandbox.emulated as emu
name = sys.argv[1]
emu.activate(name, devices=2, matmul_precision="highest")  # exact, as the CPU reference
dist.init_process_group(backend=name)
rank = dist.get_rank()
if name == "neuron":
    torch.accelerator.set_device_index(rank)
device = torch.accelerator.current_accelerator()

def net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 25, 3),
    )

model = nn.parallel.DistributedDataParallel(
    nn.SyncBatchNorm.convert_sync_batchnorm(net()).to(device))
ref = net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
torch.manual_seed(123)
data = [(torch.randn(2, 3, 3, 5, 5), torch.randint(0, 3, (2, 3))) for _ in range(3)]
losses, ref_losses = [], []
for x, y in data:
    loss = nn.functional.cross_entropy(model(x[rank].to(device)), y[rank].to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    # Reference: one CPU process, both ranks' batches in one plain batch norm.
    out = ref(torch.cat([x[0], x[1]]))
    per_rank = [nn.functional.cross_entropy(out[3 * r:3 * r + 3], y[r]) for r in (0, 1)]
    ref_opt.zero_grad()
    (sum(per_rank) / 2).backward()
    ref_opt.step()
    ref_losses.append(per_rank[rank].item())
bn, ref_bn = model.module[1], ref[1]
out = {
    "type": type(bn).__name__,
    "losses": losses,
    "ref_losses": ref_losses,
    "weight": (model.module[0].weight.detach().cpu() - ref[0].weight.detach()).abs().max().item(),
    "running_mean": (bn.running_mean.cpu() - ref_bn.running_mean).abs().max().item(),
    "running_var": (bn.running_var.cpu() - ref_bn.running_var).abs().max().item(),
}
dist.destroy_process_group()
with open(f"{sys.argv[2]}.{rank}", "w") as f:
    json.dump(out, f)
"""


def _two_ranks(tmp_path: Path, name: str, backend: str) -> subprocess.CompletedProcess:
    """SCRIPT under torchrun, two ranks on the emulated ``name`` device."""
    script = tmp_path / "syncbn.py"
    script.write_text(SCRIPT)
    env = {**os.environ, **backend_env(backend), "TMPDIR": str(tmp_path)}
    if name == "tpu":  # TorchTPU's launch step, exported in torchrun's parent
        launch_step.exported(tpu_launch.printed(2, dict(env)), env)
    return subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run"),
            *("--nproc_per_node", "2", "--standalone"),
            *(str(script), name, str(tmp_path / name)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_sync_batchnorm_two_ranks_matches_full_batch_on_cpu(tmp_path: Path, backend: str) -> None:
    proc = _two_ranks(tmp_path, "neuron", backend)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"neuron.{rank}").read_text())
        assert r["type"] == "SyncBatchNorm"
        assert r["losses"] == pytest.approx(r["ref_losses"], abs=1e-5)
        assert r["weight"] < 1e-5
        assert r["running_mean"] < 1e-6 and r["running_var"] < 1e-5


@pytest.mark.slow
def test_sync_batchnorm_two_ranks_fails_on_tpu_as_torchtpu_would(
    tmp_path: Path, backend: str
) -> None:
    """TorchTPU 0.2.0 has no batch_norm_stats: the first forward raises its own error."""
    facts = torchtpu_facts.section("device_only_ops")
    assert "batch_norm_stats" in facts["absent"]
    proc = _two_ranks(tmp_path, "tpu", backend)
    assert proc.returncode != 0
    message = facts["missing_op_error"].format(op="aten::batch_norm_stats")
    assert f"NotImplementedError: {message}" in proc.stderr, proc.stderr[-4000:]
    assert not list(tmp_path.glob("tpu.*")), "a rank finished training"


def test_kernels_split_batch_equals_batch_norm_of_whole() -> None:
    """The kernels, on two halves of a batch, give plain batch norm of the whole batch:
    output, running statistics and all three gradients (what SyncBatchNorm relies on)."""
    k = device_only_ops
    torch.manual_seed(0)
    x = (torch.randn(6, 4, 3, 3) * 3 + 1).requires_grad_()
    w = torch.randn(4, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    rm, rv = torch.zeros(4), torch.ones(4)
    ref = torch.nn.functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    gy = torch.randn_like(ref)
    ref.backward(gy)
    halves, grads = x.detach().split([2, 4]), gy.split([2, 4])
    stats = [k.batch_norm_stats(h, 1e-5) for h in halves]
    counts = torch.tensor([h.numel() // 4 for h in halves], dtype=torch.float32)
    rm2, rv2 = torch.zeros(4), torch.ones(4)
    mean, invstd = k.batch_norm_gather_stats_with_counts(
        x, *(torch.stack(s) for s in zip(*stats, strict=True)), rm2, rv2, 0.1, 1e-5, counts
    )
    wd, bd = w.detach(), b.detach()
    out = torch.cat([k.batch_norm_elemt(h, wd, bd, mean, invstd, 1e-5) for h in halves])
    torch.testing.assert_close(out, ref.detach())
    torch.testing.assert_close((rm2, rv2), (rm, rv))
    red = [
        k.batch_norm_backward_reduce(g, h, mean, invstd, wd, True, True, True)
        for g, h in zip(grads, halves, strict=True)
    ]
    sum_dy, sum_dy_xmu, gw, gb = (r0 + r1 for r0, r1 in zip(*red, strict=True))
    gx = torch.cat(
        [
            k.batch_norm_backward_elemt(g, h, mean, invstd, wd, sum_dy, sum_dy_xmu, counts.int())
            for g, h in zip(grads, halves, strict=True)
        ]
    )
    torch.testing.assert_close((gx, gw, gb), (x.grad, w.grad, b.grad))


REFERENCE_SCRIPT = """
import json, sys
import torch, torch.nn as nn, torch.distributed as dist
from torchport.sandbox import shim
shim.activate()  # the CUDA reference: the original program, on the CPU
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)

def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 25, 3))

model = nn.parallel.DistributedDataParallel(
    nn.SyncBatchNorm.convert_sync_batchnorm(net()).cuda(), device_ids=[rank])
torch.manual_seed(123)
data = [(torch.randn(2, 3, 3, 5, 5), torch.randint(0, 3, (2, 3))) for _ in range(3)]
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for x, y in data:
    loss = nn.functional.cross_entropy(model(x[rank].cuda()), y[rank].cuda())
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
out = {"losses": losses, "running_var": model.module[1].running_var.tolist(),
       "records": sorted({r["api"] for r in shim.intercepted()})}
dist.destroy_process_group()
shim.deactivate()
try:
    torch.batch_norm_stats(torch.ones(2, 2), 1e-5)
    out["cpu_kernel_after_deactivate"] = True
except NotImplementedError:
    out["cpu_kernel_after_deactivate"] = False
# The same training in one process: plain batch norm over both ranks' batches.
ref = net()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
out["ref_losses"] = []
for x, y in data:
    o = ref(torch.cat([x[0], x[1]]))
    per_rank = [nn.functional.cross_entropy(o[3 * r:3 * r + 3], y[r]) for r in (0, 1)]
    ref_opt.zero_grad()
    (sum(per_rank) / 2).backward()
    ref_opt.step()
    out["ref_losses"].append(per_rank[rank].item())
out["ref_running_var"] = ref[1].running_var.tolist()
with open(f"{sys.argv[1]}.{rank}", "w") as f:
    json.dump(out, f)
"""


@pytest.mark.slow
def test_reference_shim_synchronises_sync_batchnorm_across_ranks(tmp_path: Path) -> None:
    """The CUDA original's SyncBatchNorm on the reference CPU: statistics over both ranks'
    batches, as on GPUs (before, the shim kept per-process batch norm, so a port that
    synchronised did not match its own original)."""
    script = tmp_path / "reference.py"
    script.write_text(REFERENCE_SCRIPT)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run"),
            *("--nproc_per_node", "2", "--standalone"),
            *(str(script), str(tmp_path / "ref")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"ref.{rank}").read_text())
        assert r["losses"] == pytest.approx(r["ref_losses"], abs=1e-5)
        assert r["running_var"] == pytest.approx(r["ref_running_var"], abs=1e-5)
        assert "SyncBatchNorm.forward" in r["records"]
        assert r["cpu_kernel_after_deactivate"] is False  # CPU torch's own error again
