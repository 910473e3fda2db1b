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
