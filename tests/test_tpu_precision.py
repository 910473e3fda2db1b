"""TorchTPU's matmul arithmetic on the emulated ``tpu`` device, and the precision a run
can pin for the verifier (``RunSpec.matmul_precision``), carried to every process."""

from __future__ import annotations

import textwrap

import pytest
from torchport.sandbox import matmul_precision
from torchport.sandbox.harness import RunError, RunSpec, launcher_argv, run
from torchport.sandbox.session import RunConfig


def test_a_run_pins_only_torchs_precision_names_and_says_which(tmp_path):
    assert RunSpec(root=tmp_path, command=["python", "x.py"]).matmul_precision is None
    assert RunSpec(root=tmp_path, command=["python", "x.py"], matmul_precision="highest")
    with pytest.raises(RunError, match=r"matmul_precision .*'highest'.*not 'HIGHEST'"):
        RunSpec(root=tmp_path, command=["python", "x.py"], matmul_precision="HIGHEST")
    assert set(matmul_precision.choices()) == {"medium", "high", "highest"}


def test_the_pinned_precision_reaches_the_launcher_and_every_child_of_the_run(tmp_path):
    spec = RunSpec(root=tmp_path, command=["python", "x.py"], mode="tpu", matmul_precision="high")
    argv = launcher_argv(spec, tmp_path, tmp_path)
    assert argv[argv.index("--matmul-precision") + 1] == "high"
    plain = launcher_argv(RunSpec(root=tmp_path, command=["python", "x.py"]), tmp_path, tmp_path)
    assert "--matmul-precision" not in plain
    config = RunConfig(mode="tpu", results=str(tmp_path), matmul_precision="highest")
    assert RunConfig.from_env(config.to_env()).matmul_precision == "highest"


PINNED = """\
import multiprocessing
import torch
from torchport.sandbox.emulator import precision


def child(queue):
    import torch  # the child's session activates the device as it imports torch
    from torchport.sandbox.emulator import precision
    queue.put(precision.pinned)


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    worker = context.Process(target=child, args=(queue,))
    worker.start()
    print("PINNED", precision.pinned, queue.get(timeout=120))
    worker.join()
"""


@pytest.mark.slow
def test_a_sandboxed_run_pins_the_precision_in_the_program_and_its_children(tmp_path):
    root = tmp_path / "prog"
    root.mkdir()
    (root / "main.py").write_text(textwrap.dedent(PINNED))
    result = run(
        RunSpec(
            root=root, command=["python", "main.py"], mode="tpu", timeout_s=180,
            matmul_precision="highest",
        )
    )  # fmt: skip
    assert result.status == "ok", (result.error, result.stderr_tail)
    assert "PINNED highest highest" in result.stdout_tail
