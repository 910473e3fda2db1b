"""The ``torchport`` command line: the composition root that puts every front door
under one parser. Each command is a module of this package with ``add_parser(sub)``;
the order of ``COMMANDS`` is the order ``torchport --help`` lists them in."""

from __future__ import annotations

import argparse
import os
import sys

from torchport.sandbox.isolation import hide_own_secrets
from torchport.tools import __version__
from torchport.tools.catalogue import CatalogueError
from torchport.tools.filenames import PRINTABLE_ERRORS

from . import batch, chat, config, doctor, evaluate, mcp, migrate, rules, run, scan
from .options import EXIT_ERROR, OneLineParser, fail

COMMANDS = (scan, migrate, batch, evaluate, chat, mcp, config, doctor, run, rules)


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="torchport",
        description="Port PyTorch programs off CUDA (to tpu, neuron, xla or device-agnostic "
        "torch.accelerator code) and prove the port on an emulated device.",
    )
    parser.add_argument("--version", action="version", version=f"torchport {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


# What a shell reports for a program that SIGPIPE ended (`cat file | head -1`): the
# reader left early, which is not an error of ours, but the output is incomplete.
EXIT_BROKEN_PIPE = 128 + 13


def _printable_output() -> None:
    """A file name that is not UTF-8 shows as ``\\xNN`` on our output instead of ending
    the command with UnicodeEncodeError (a strict UTF-8 locale, or a pipe)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=PRINTABLE_ERRORS)


def _quiet_broken_pipe() -> int:
    """The reader closed our standard output (``| head``): Python's documented recipe,
    point stdout at devnull so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    hide_own_secrets()  # before anything runs: programs of our user cannot read our keys
    _printable_output()
    try:
        status = _run(argv)
        sys.stdout.flush()  # a reader that left shows up here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _run(argv: list[str] | None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad option (already said)
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return args.func(args)
    except CatalogueError as exc:
        return fail(f"rule catalogue is broken: {exc}")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
