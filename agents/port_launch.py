"""Where a tpu port's launch line takes TorchTPU's launch step before its torchrun command.

The verifier runs a port with the original's entry command (``torchrun ... train.py``). On
TorchTPU a torchrun line runs only behind the launch step, which decides the variables every
rank must agree on: the tpu codemods (TPN010) write ``eval "$(python -m torch.tpu.distributed
| sed 's/^/export /')" && `` before the command in shell scripts, Make recipes and YAML. Such a
line, naming the same command, is the port's command as its files have it; where no file has
one, the verifier gives the entry command the step in the same form and reports that command
as the one to run (``agents.verifier._stepped_launch``). Either way the run takes the step
(``RunSpec(launch_step=True)``); a worker started without it fails at its first device use, as
on TorchTPU.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from torchport.sandbox import torchtpu_facts
from torchport.sandbox.safepath import read_inside

# Where launch lines are (the files TPN010 writes the step into).
LAUNCH_SUFFIXES = (".sh", ".bash", ".yaml", ".yml", ".mk")
LAUNCH_NAMES = ("makefile", "gnumakefile")


def _step() -> str:
    return f"python -m {torchtpu_facts.section('distributed')['launch_module']}"


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def stepped_command(line: str, argv: list[str]) -> str | None:
    """The shell command of ``line`` when it takes the launch step and then (``&&``) runs
    ``argv`` (extra words after it are the line's own), else None."""
    at = line.find(_step())
    joined = line.find("&&", at) if at >= 0 else -1
    if joined < 0 or not argv:
        return None
    if _words(line[joined + 2 :])[: len(argv)] != argv:
        return None
    start = line.rfind("eval", 0, at)
    return " ".join(line[start if start >= 0 else at :].split())


def launch_files(tree: Path) -> Iterable[tuple[str, str]]:
    """(relative path, text) of each shell script, Makefile and YAML file of ``tree``."""
    for path in sorted(tree.rglob("*")):
        name = PurePosixPath(path.name.lower())
        if not (name.suffix in LAUNCH_SUFFIXES or name.name in LAUNCH_NAMES):
            continue
        rel = path.relative_to(tree)
        if ".git" in rel.parts:
            continue
        try:
            yield str(rel), read_inside(tree, rel).decode("utf-8", "replace")
        except OSError:
            continue


def port_command(tree: Path, argv: list[str]) -> str | None:
    """The port's launch command with the step (as its file has it), or None when no launch
    line of ``tree`` takes the step before ``argv``."""
    for _rel, text in launch_files(tree):
        for line in text.splitlines():
            found = stepped_command(line, argv)
            if found is not None:
                return found
    return None
