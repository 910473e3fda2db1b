"""The command line's composition root: every front door is registered by its own
module of ``torchport.cli`` and dispatches to that module's handler."""

from __future__ import annotations

import pytest
from torchport.cli import main

# A command line each front door accepts (parsing only: nothing runs).
ARGV = {
    "scan": ["scan", "repo"],
    "migrate": ["migrate", "repo", "-t", "tpu"],
    "batch": ["batch", "repo", "-t", "tpu", "-o", "out"],
    "eval": ["eval"],
    "chat": ["chat", "repo"],
    "mcp": ["mcp", "repo"],
    "config": ["config", "repo"],
    "doctor": ["doctor"],
    "run": ["run", "--", "python", "train.py"],
    "rules": ["rules"],
}


def test_every_command_module_registers_one_command() -> None:
    assert len(main.COMMANDS) == len(ARGV)


@pytest.mark.parametrize("command", main.COMMANDS, ids=lambda module: module.__name__)
def test_a_command_dispatches_to_a_function_of_its_own_module(command) -> None:
    name = command.__name__.rpartition(".")[2]
    argv = ARGV["eval" if name == "evaluate" else name]
    func = main._build_parser().parse_args(argv).func
    assert callable(func) and func.__module__ == command.__name__, func


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--target", "neuron", "--", "torchrun", "train.py"], "runs in mode tpu, not 'neuron'"),
        (["--target", "tpu", "--", "python", "train.py"], "the command is not torchrun"),
    ],
)
def test_run_refuses_the_tpu_launch_step_where_torchtpu_takes_none(
    argv: list[str], says: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tpu-launch-step`` is TorchTPU's step before torchrun: elsewhere a one-line error,
    nothing run."""
    status = main.main(["run", "--root", str(tmp_path), "--tpu-launch-step", *argv])
    err = capsys.readouterr().err
    assert status != 0 and err.startswith("torchport: error: the launch step"), err
    assert says in err and "Traceback" not in err
