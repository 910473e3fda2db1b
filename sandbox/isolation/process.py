"""process backend: the last resort, and NOT isolation.

Only rlimits (and a cgroup where writable), a wall clock, a scratch working
directory and an allowlisted environment. The program can still reach the
network and the host's Unix sockets (docker.sock: a root program can start a
container that writes anywhere) and write wherever the user can, so every use
warns loudly. What it does keep: torchport's own credentials, which every
torchport process hides at start (secrets.hide_own_secrets); as root the
program also runs with no capabilities, so that CAP_SYS_PTRACE cannot undo that.
"""

from __future__ import annotations

import os
import shutil

from .spec import RunSpec

WARNING = (
    "torchport sandbox: backend 'process' does NOT isolate: the program can use the "
    "network and the host's Unix sockets (docker.sock) and write outside scratch. "
    "Install bubblewrap (scripts/ensure-sandbox-tools)."
)
_DROP_CAPS = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def command(spec: RunSpec) -> list[str]:
    """The program itself; as root, through setpriv with every capability dropped."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() == 0 and setpriv is not None:
        return [setpriv, *_DROP_CAPS, *spec.argv]
    return list(spec.argv)


def unavailable() -> str | None:
    """Always available: it needs nothing."""
    return None
