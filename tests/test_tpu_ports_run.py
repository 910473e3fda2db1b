"""The tpu ports of a torchrun worker's device code run on the emulated tpu: the RNG state
form TPR002 emits round-trips the device generator, the streams TPT003 emits order the work,
and the rank's device is the process's own (TPD002/TPD003/TPD005/TPD010/TPD017), in one
process and in each rank of a 2-process torchrun."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tpu_port_conformance import problems
from torchport.sandbox.harness import RunSpec, run
from torchport.tools.migrate import MigrateOptions, migrate

WORKER = """\
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank)
distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("nccl")
device = torch.device("cuda", local_rank)
torch.manual_seed(0)
with torch.cuda.device(local_rank):
    state = torch.cuda.get_rng_state()
first = torch.rand(3, device=device)
torch.cuda.set_rng_state(state)
again = torch.rand(3, device=f"cuda:{local_rank}")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    doubled = (first * 2).to(local_rank)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.set_stream(torch.cuda.current_stream())
replayed = torch.equal(first.cpu(), again.cpu())
placed = " ".join(str(t.device) for t in (first, again, doubled))
sys.stderr.write(f"rank {local_rank}: replayed {replayed} on {placed}\\n")  # one write a rank

model = torch.nn.Linear(4, 1).cuda(local_rank)
if distributed:
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 4).to(device), torch.randn(16, 1).to(device)
for step in range(3):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def _port(tmp_path: Path) -> Path:
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    (original / "train.py").write_text(WORKER)
    migrate(original, MigrateOptions(target="tpu", out=port))
    ported = (port / "train.py").read_text()
    assert "torch.cuda" not in ported and problems(ported) == [], ported
    return port


@pytest.mark.slow
def test_the_tpu_port_replays_its_rng_state_on_its_one_device(tmp_path: Path) -> None:
    port = _port(tmp_path)
    result = run(RunSpec(root=port, command=["python", "train.py"], mode="tpu", steps=3))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "rank 0: replayed True on tpu:0 tpu:0 tpu:0" in result.stderr_tail
    assert result.steps == 3


@pytest.mark.slow
def test_each_torchrun_rank_of_the_tpu_port_runs_on_its_own_tpu0(tmp_path: Path) -> None:
    port = _port(tmp_path)
    command = ["torchrun", "--standalone", "--nproc_per_node", "2", "train.py"]
    # launched as a tpu port's torchrun line is: behind TorchTPU's launch step (TPN010's eval
    # "$(python -m torch.tpu.distributed ...)" && torchrun ..., the verifier's _stepped_launch)
    result = run(RunSpec(root=port, command=command, mode="tpu", steps=3, launch_step=True))
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert [r["rank"] for r in result.ranks] == [0, 1]
    assert all(len(r["losses"]) == 3 for r in result.ranks)
    for rank in (0, 1):
        assert f"rank {rank}: replayed True on tpu:0 tpu:0 tpu:0" in result.stderr_tail
