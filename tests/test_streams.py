"""CUDA streams ported to TorchTPU's (TPT003): a data prefetcher that copies each next batch
on a side stream, in the forms real loaders use, migrates with rules only and verifies on the
emulated tpu, with the stream branch taken in both runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_emulator import run_snippet
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.tools.migrate import MigrateOptions, migrate

_PREFETCHER = """from contextlib import suppress
from functools import partial

import sys

import torch


class Prefetcher:
    def __init__(self, batches, device):
        self.batches = batches
        self.device = device
        self.is_cuda = device.type == "cuda" and torch.cuda.is_available()

    def __iter__(self):
        if self.is_cuda:
            stream = torch.cuda.Stream(device=self.device)
            stream_context = partial(torch.cuda.stream, stream=stream)
        else:
            stream = None
            stream_context = suppress
        print("side stream:", stream is not None, file=sys.stderr)
        ready = None
        for x, y in self.batches:
            with stream_context():
                x = x.to(device=self.device, non_blocking=True)
                y = y.to(device=self.device, non_blocking=True)
            if ready is not None:
                yield ready
            if stream is not None:
                torch.cuda.current_stream(device=self.device).wait_stream(stream)
            ready = x, y
        yield ready


device = torch.device("cuda")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
model = model.to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
batches = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(4)]
side = torch.cuda.Stream()
for x, y in Prefetcher(batches, device):
    with torch.cuda.stream(side):
        y = y * 1.0
    torch.cuda.current_stream().wait_stream(side)
    side.synchronize()
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.current_stream().synchronize()
"""


@pytest.mark.slow
def test_a_side_stream_prefetcher_verifies_on_tpu(tmp_path: Path) -> None:
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    (original / "train.py").write_text(_PREFETCHER)
    migrate(original, MigrateOptions(target="tpu", out=port))
    ported = (port / "train.py").read_text()
    assert "torch.cuda" not in ported, ported
    assert "partial(torch.tpu.stream, stream=stream)" in ported
    # current_stream is internal to TorchTPU on every torch it allows: torch.accelerator's,
    # whose device is positional-only
    assert "torch.accelerator.current_stream(self.device).wait_stream(stream)" in ported
    assert "torch.tpu.current_stream" not in ported

    budget = RunLimits(steps=4, timeout_s=120, memory_mb=2048)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", budget, None)
    assert (v.verdict, v.parity.steps) == ("verified", 4), v.reason
    # Both runs took the stream branch: the port is on the device, not on its CPU fallback.
    assert "side stream: True" in reference["stderr_tail"]
    assert "side stream: True" in v.target["stderr_tail"]
    assert not v.target["counters"].get("cuda_calls"), v.target["counters"]


@pytest.mark.slow
def test_the_emulated_tpu_runs_what_the_port_calls_and_refuses_record_stream() -> None:
    result = run_snippet(
        """
        from functools import partial
        dev = torch.device("tpu")  # the process's one device, as on TorchTPU
        s = torch.tpu.Stream(device=dev)
        with partial(torch.tpu.stream, stream=s)():
            x = torch.arange(4.0).to(device=dev, non_blocking=True)
        with torch.tpu.stream(torch.tpu.Stream()):
            y = (x * 2).to("tpu:0", non_blocking=True)
        torch.accelerator.current_stream(dev).wait_stream(s)
        torch.tpu.default_stream(dev).wait_stream(s)
        torch.accelerator.set_stream(torch.accelerator.current_stream())
        s.synchronize()
        torch.accelerator.current_stream().synchronize()
        result["stream_device"] = str(s.device)
        result["y"] = [str(y.device), y.cpu().tolist()]
        try:
            y.record_stream(torch.accelerator.current_stream(dev))
        except NotImplementedError as e:
            result["record_stream"] = str(e)
        try:  # internal on TorchTPU (torch >= 2.11): torch.accelerator's is the public one
            torch.tpu.current_stream(dev)
        except RuntimeError as e:
            result["internal"] = str(e)
        """
    )
    assert result["stream_device"] == "tpu:0"
    assert result["y"] == ["tpu:0", [0.0, 2.0, 4.0, 6.0]]
    assert result["record_stream"].startswith("Tensor.record_stream is not emulated")
    assert result["internal"].startswith("current_stream is internal to TorchTPU")
    assert result["internal"].endswith("Use torch.accelerator.current_stream instead.")
