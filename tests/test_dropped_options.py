"""User options a port drops are reported (issue 31): ``torch.compile(mode="max-autotune")``
losing its mode, ``--tf32``/``--benchmark`` options whose settings the port removes. Each is
an entry of changes.json's ``dropped_options``, counted in its summary, listed in manual.md
and in the CLI's line; a ``--tf32`` that the target can honour is mapped instead (TorchTPU:
its one matmul precision, for the cuDNN flag as for the matmul one)."""

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
    import argparse

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--benchmark", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = args.benchmark
    torch.backends.cudnn.deterministic = True
    model = torch.compile(torch.nn.Linear(4, 1).cuda(), mode="max-autotune", fullgraph=True)
    """
)
CUDNN_ONLY = textwrap.dedent(
    """
    import argparse

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--tf32", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = args.tf32
    print("precision", torch.get_float32_matmul_precision())
    """
)


def _migrate(tmp_path: Path, program: str, target: str, capsys) -> tuple[Path, str]:
    source = tmp_path / "repo"
    source.mkdir(exist_ok=True)
    (source / "train.py").write_text(program)
    out = tmp_path / target
    capsys.readouterr()
    assert cli(["migrate", str(source), "-t", target, "--llm", "none", "--no-verify",
                "--out", str(out)]) == 0  # fmt: skip
    return out, capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        # tpu: the matmul flag became the one precision, which args.tf32 still chooses
        ("tpu", [(12, "the effect of args.benchmark"), (14, "mode='max-autotune'")]),
        (
            "neuron",  # no precision to set: --tf32 does nothing there
            [
                (10, "the effect of args.tf32"),
                (11, "the effect of args.tf32"),
                (12, "the effect of args.benchmark"),
                (14, "mode='max-autotune'"),
            ],
        ),
    ],
)
def test_each_dropped_option_is_reported_and_counted(tmp_path, capsys, target, expected):
    out, printed = _migrate(tmp_path, PROGRAM, target, capsys)
    report = json.loads((out / "torchport-report" / "changes.json").read_text())
    dropped = report["dropped_options"]
    assert [(d["line"], d["option"]) for d in dropped] == expected
    assert report["summary"]["dropped_options"] == len(expected)
    compile_mode = dropped[-1]
    assert (compile_mode["rule"], compile_mode["of"]) == ("TPC001", "torch.compile")
    assert compile_mode["text"].startswith("dropped: mode='max-autotune' of torch.compile, ")
    assert f"; {len(expected)} user options dropped (manual.md)" in printed
    manual = (out / "torchport-report" / "manual.md").read_text()
    assert "# User options the port dropped" in manual
    assert manual.count("dropped: ") == len(expected)
    summary = (out / "torchport-report" / "summary.md").read_text()
    assert f"{len(expected)} user options the original was given were dropped" in summary


def test_a_port_that_drops_nothing_says_nothing(tmp_path, capsys):
    program = "import torch\nmodel = torch.compile(torch.nn.Linear(4, 1).cuda())\n"
    out, printed = _migrate(tmp_path, program, "tpu", capsys)
    report = json.loads((out / "torchport-report" / "changes.json").read_text())
    assert report["dropped_options"] == [] and report["summary"]["dropped_options"] == 0
    assert "dropped" not in printed
    assert "User options" not in (out / "torchport-report" / "manual.md").read_text()


def test_a_value_the_port_passes_positionally_is_not_dropped(tmp_path, capsys):
    """``torch.cuda.current_stream(device=self.device)`` becomes
    ``torch.accelerator.current_stream(self.device)`` on tpu: the device is still passed."""
    program = textwrap.dedent(
        """
        import torch

        def wait(device, stream):
            torch.cuda.current_stream(device=device).wait_stream(stream)
        """
    )
    out, _ = _migrate(tmp_path, program, "tpu", capsys)
    assert "torch.accelerator.current_stream(device)" in (out / "train.py").read_text()
    report = json.loads((out / "torchport-report" / "changes.json").read_text())
    assert report["dropped_options"] == [], report["dropped_options"]


def test_a_cudnn_tf32_option_becomes_the_tpu_precision_it_chooses(tmp_path, capsys):
    out, _ = _migrate(tmp_path, CUDNN_ONLY, "tpu", capsys)
    port = (out / "train.py").read_text()
    assert 'torch.set_float32_matmul_precision("high" if args.tf32 else "highest")' in port
    report = json.loads((out / "torchport-report" / "changes.json").read_text())
    assert report["dropped_options"] == []


@pytest.mark.slow
def test_the_mapped_tf32_option_sets_the_precision_on_the_emulated_tpu(tmp_path, capsys):
    out, _ = _migrate(tmp_path, CUDNN_ONLY, "tpu", capsys)
    seen = []
    for flag in ([], ["--tf32"]):
        command = [sys.executable, "-m", "torchport.cli", "run", "--target", "tpu", "--root",
                   str(out), "--steps", "5", "--timeout", "240", "-f", "json", "--",
                   "python", "train.py", *flag]  # fmt: skip
        proc = subprocess.run(command, capture_output=True, text=True, timeout=400)
        result = json.loads(proc.stdout)
        assert result["status"] == "ok", (result["error"], result["stderr_tail"][-3000:])
        seen.append(result["stdout_tail"].split())
    assert seen == [["precision", "highest"], ["precision", "high"]]


def test_a_dropped_option_says_why_for_the_target(tmp_path, capsys):
    """``set_device(args.gpu)`` goes on tpu because a TorchTPU process has one device: the
    entry says so, not only that CUDA is missing."""
    program = textwrap.dedent(
        """
        import argparse

        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--gpu", type=int, default=0)
        args = parser.parse_args()
        torch.cuda.set_device(args.gpu)
        """
    )
    out, _ = _migrate(tmp_path, program, "tpu", capsys)
    report = json.loads((out / "torchport-report" / "changes.json").read_text())
    (entry,) = report["dropped_options"]
    assert entry["option"] == "the effect of args.gpu"
    assert "on tpu: remove (a TorchTPU process has one device" in entry["why"], entry["why"]
