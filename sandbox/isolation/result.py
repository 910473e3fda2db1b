"""What a sandboxed run hands back, and the errors and warnings it can raise."""

from __future__ import annotations

from dataclasses import dataclass


class IsolationWarning(UserWarning):
    """Raised (as a warning) when code runs with weaker isolation than asked for.

    A separate category so that callers and tests can filter or escalate it.
    """


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says why and how to fix it."""


@dataclass(frozen=True)
class IsolationResult:
    """Outcome of one isolated run.

    ``stdout``/``stderr`` are tails (the last bytes the program wrote), because a
    runaway program may print without end and the caller only needs the end to
    diagnose it. ``killed`` names why the sandbox stopped the program
    (``"timeout"``, ``"memory"``, ``"cpu-time"``, ``"signal SIGKILL"``...), or is
    ``None`` when it exited on its own.
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    killed: str | None
    backend: str
    elapsed_s: float
