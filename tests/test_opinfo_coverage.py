"""benchmarks/opinfo_coverage.py runs PyTorch's OpInfo samples on the CPU and on the emulated
device and sorts each op into matched / differed / not implemented / error.

Run as the command it is, on a few named ops, on the Python emulator (the native one is the
same loop in another process). PyTorch's test utilities need ``expecttest``.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "opinfo_coverage.py"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("expecttest") is None,
    reason="expecttest is not installed (torch.testing._internal's OpInfo database needs it)",
)


def coverage(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--backends",
            "python",
            "--json",
            str(tmp_path / "c.json"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_three_named_ops_are_run_compared_and_counted(tmp_path: Path) -> None:
    done = coverage(tmp_path, "--ops", "add,nn.functional.batch_norm,cumsum", "--samples", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(
        "3 of 3 ops ran and matched the CPU on the emulated tpu device (python backend); "
        "0 differed (+0 PyTorch marks not comparable), 0 not implemented (none)"
    )
    report = json.loads((tmp_path / "c.json").read_text())
    python = report["backends"]["python"]
    assert python["counts"]["matched"] == 3
    assert python["ops"]["matched"] == ["add", "cumsum", "nn.functional.batch_norm"]
    assert report["samples"] == 2 and report["matmul_precision"] == "highest"


@pytest.mark.slow
def test_unknown_op_name_is_refused_by_name(tmp_path: Path) -> None:
    done = coverage(tmp_path, "--ops", "add,no_such_op")
    assert done.returncode == 2
    assert "not float32 OpInfo names in op_db: no_such_op" in done.stderr
    assert "Traceback" not in done.stderr
