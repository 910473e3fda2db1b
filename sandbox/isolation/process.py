"""process backend: the last resort, and NOT isolation.

Only rlimits (and a cgroup where writable), a wall clock, a scratch working
directory and an allowlisted environment. The program can still reach the
network and write wherever the user can, so every use warns loudly.
"""

from __future__ import annotations

from .spec import RunSpec

NAME = "process"
WARNING = (
    "torchport sandbox: backend 'process' does NOT isolate: the program can use the "
    "network and write outside scratch. Install bubblewrap (scripts/ensure-sandbox-tools)."
)


def command(spec: RunSpec) -> list[str]:
    """The program itself, unwrapped."""
    return list(spec.argv)


def unavailable() -> str | None:
    """Always available: it needs nothing."""
    return None
