"""TorchTPU's launch step in torchrun's parent, as a port's launch line takes it.

A tpu port's shell line ``eval "$(python -m torch.tpu.distributed | sed 's/^/export /')" &&
torchrun ...`` runs the step in a Python process of its own, exports what it prints, and
starts torchrun only if it succeeded; every rank inherits the variables. Under
``RunSpec(launch_step=True)`` the harness starts torchrun through this module, which does
the same on the emulated host:

    python -P -s -m torchport.sandbox.launch_step --devices 2 -- python -m torch.distributed.run ...

The step runs on a copy of the environment (the printing process's own changes do not reach
the shell); only the printed assignments are exported, then this process becomes torchrun.
Stdlib only: torch is not imported in torchrun's parent.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import MutableMapping

from .tpu_launch import printed

# The launch step failed: torchrun is not started (the shell's ``&&``).
STEP_FAILED = 1


def exported(lines: list[str], environ: MutableMapping[str, str]) -> None:
    """``eval "$(... | sed 's/^/export /')"``: each ``NAME="value"`` line exported."""
    for line in lines:
        name, _, value = line.partition("=")
        environ[name] = " ".join(shlex.split(value))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args or not args[args.index("--") + 1 :]:
        raise SystemExit("usage: python -m torchport.sandbox.launch_step --devices N -- COMMAND")
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="torchport.sandbox.launch_step")
    parser.add_argument("--devices", type=int, required=True, help="the emulated host's chips")
    options = parser.parse_args(args[:split])
    command = args[split + 1 :]
    try:
        lines = printed(options.devices, dict(os.environ))
    except (RuntimeError, ValueError) as exc:
        print(f"python -m torch.tpu.distributed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return STEP_FAILED
    exported(lines, os.environ)
    sys.stdout.flush()
    os.execv(command[0], command)
    return STEP_FAILED  # not reached: this process is torchrun now


if __name__ == "__main__":
    sys.exit(main())
