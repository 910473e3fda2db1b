"""CUDA-event timing ported (TPT002): one synchronize before each timestamp, and the units of
the original kept without conversions that cancel (issue 31: a port read ``synchronize();
ender = time.perf_counter(); synchronize(); t += 1e-3 * (ender - starter) * 1000.0``).

The program times a step the way speed-run scripts do and uses ``elapsed_time`` in each form:
accumulated as seconds, printed as milliseconds, inside a larger expression. The ports are
run for real: the tpu one on the emulated device, the accelerator one on plain CPU torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torchport.cli.main import main as cli

PROGRAM = textwrap.dedent(
    """
    import torch

    model = torch.nn.Linear(4, 1).cuda()
    x = torch.randn(8, 4).cuda()
    total = 0.0
    for epoch in range(3):
        starter, ender = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        starter.record()
        y = model(x)
        ender.record()
        torch.cuda.synchronize()
        total += 1e-3 * starter.elapsed_time(ender)
        print("epoch ms", starter.elapsed_time(ender))
        shifted = starter.elapsed_time(ender) + 1.0
    print("seconds", total, "shifted", shifted, "last", 1e-3 * (shifted - 1.0))
    """
)


def _port(tmp_path: Path, target: str) -> Path:
    source = tmp_path / "repo"
    if not source.exists():
        source.mkdir()
        (source / "train.py").write_text(PROGRAM)
    out = tmp_path / target
    assert cli(["migrate", str(source), "-t", target, "--llm", "none", "--no-verify", "-q",
                "--out", str(out)]) == 0  # fmt: skip
    return out


def _body(port: str) -> list[str]:
    return [line.strip() for line in port.splitlines() if line.startswith("    ")]


def _check_output(stdout: str) -> None:
    lines = [line.split() for line in stdout.splitlines()]
    epochs = [float(words[-1]) for words in lines if words[:2] == ["epoch", "ms"]]
    assert len(epochs) == 3 and all(ms >= 0 for ms in epochs)
    _, seconds, _, shifted, _, last = next(w for w in lines if w[0] == "seconds")
    # milliseconds stay milliseconds, the accumulated seconds are seconds: the same interval
    assert float(last) == pytest.approx(1e-3 * epochs[-1])
    assert float(seconds) == pytest.approx(1e-3 * sum(epochs))
    assert float(shifted) == pytest.approx(epochs[-1] + 1.0)


def test_one_synchronize_per_timestamp_and_no_conversion_that_cancels(tmp_path: Path):
    body = _body((_port(tmp_path, "tpu") / "train.py").read_text())
    start = body.index("starter = time.perf_counter()")
    end = body.index("ender = time.perf_counter()")
    assert body[start - 1 : start + 1] == ["torch.accelerator.synchronize()", body[start]]
    assert body[start - 2] != "torch.accelerator.synchronize()"  # the original's one, alone
    assert body[end - 1] == "torch.accelerator.synchronize()"
    assert body[end + 1] == "total += ender - starter"  # seconds, as the original summed
    assert body[end + 2] == 'print("epoch ms", (ender - starter) * 1000.0)'
    assert body[end + 3] == "shifted = (ender - starter) * 1000.0 + 1.0"
    assert sum("synchronize()" in line for line in body) == 2


def test_the_accelerator_port_runs_and_keeps_the_units(tmp_path: Path):
    out = _port(tmp_path, "accelerator")
    body = _body((out / "train.py").read_text())
    assert "total += ender - starter" in body
    proc = subprocess.run([sys.executable, "train.py"], cwd=out, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_output(proc.stdout)


@pytest.mark.slow
def test_the_tpu_port_runs_on_the_emulated_device_and_keeps_the_units(tmp_path: Path):
    out = _port(tmp_path, "tpu")
    # --steps 50: past the program's 3 forward calls
    command = [sys.executable, "-m", "torchport.cli", "run", "--target", "tpu", "--root",
               str(out), "--steps", "50", "--timeout", "240", "-f", "json", "--",
               "python", "train.py"]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400)
    result = json.loads(proc.stdout)
    assert result["status"] == "ok", (result["error"], result["stderr_tail"][-3000:])
    _check_output(result["stdout_tail"])
