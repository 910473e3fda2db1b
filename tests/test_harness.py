"""The run harness: a step budget that stops programs cleanly, loss capture, output
summaries for inference, error classification, limits. Mode "plain" (no device
activation) keeps these tests independent of the emulator and the shim."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torchport.sandbox.harness import RunError, RunSpec, run

TRAIN = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for step in range(1000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("finished all steps")
"""


def _program(tmp_path: Path, text: str, name: str = "main.py") -> Path:
    root = tmp_path / "prog"
    root.mkdir(exist_ok=True)
    (root / name).write_text(textwrap.dedent(text))
    return root


def _run(root: Path, *command: str, **spec) -> object:
    spec.setdefault("isolation", "process")
    return run(RunSpec(root=root, command=["python", *command], timeout_s=120, **spec))


def test_the_step_budget_stops_training_cleanly_and_losses_are_captured(tmp_path):
    result = _run(_program(tmp_path, TRAIN), "main.py", steps=5)
    assert result.status == "ok", result.stderr_tail
    assert result.steps == 5 and len(result.losses) == 5
    assert result.losses[-1] < result.losses[0]
    assert "budget reached" in result.stopped
    assert "finished all steps" not in result.stdout_tail


def test_same_seed_same_losses_and_the_program_dir_is_not_touched(tmp_path):
    root = _program(
        tmp_path, TRAIN.replace("torch.manual_seed(0)\n", "") + "open('out.txt', 'w').write('x')\n"
    )
    first = _run(root, "main.py", steps=3, seed=7)
    second = _run(root, "main.py", steps=3, seed=7)
    assert first.losses == second.losses
    assert not (root / "out.txt").exists()  # runs happen in a scratch copy


def test_inference_programs_report_output_summaries(tmp_path):
    root = _program(
        tmp_path,
        """\
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        with torch.no_grad():
            for _ in range(100):
                out = model(torch.ones(2, 4))
        """,
    )
    result = _run(root, "main.py", forwards=3)
    assert result.status == "ok" and result.forwards == 3 and result.steps == 0
    assert result.outputs[0]["shape"] == [2, 8]


def test_errors_are_classified_with_the_users_frame(tmp_path):
    root = _program(
        tmp_path,
        """\
        import torch

        def build():
            return torch.zeros(2).cuda()

        build()
        """,
    )
    result = _run(root, "main.py")
    assert result.status == "failed"
    assert result.error["type"] in ("AssertionError", "RuntimeError")
    assert result.error["frame"]["function"] == "build"
    assert result.error["frame"]["line"] == 4


def test_exit_codes_and_modules(tmp_path):
    root = _program(tmp_path, "import sys\nsys.exit(3)\n")
    assert _run(root, "main.py").exit_code == 3
    pkg = tmp_path / "prog" / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys\nprint('module', sys.argv[1:])\n")
    result = _run(tmp_path / "prog", "-m", "pkg", "a")
    assert result.status == "ok" and "module ['a']" in result.stdout_tail


def test_a_sleeping_program_is_stopped_at_the_time_limit(tmp_path):
    root = _program(tmp_path, "import time\ntime.sleep(60)\n")
    result = run(
        RunSpec(root=root, command=["python", "main.py"], timeout_s=3, isolation="process")
    )
    assert result.status == "timeout" and result.elapsed_s < 30


def test_bad_commands_are_refused(tmp_path):
    root = _program(tmp_path, "pass\n")
    with pytest.raises(RunError, match="only python programs"):
        run(RunSpec(root=root, command=["bash", "x.sh"]))
    with pytest.raises(RunError, match="unknown mode"):
        run(RunSpec(root=root, command=["python", "main.py"], mode="gpu"))
