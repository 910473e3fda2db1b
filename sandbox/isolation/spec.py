"""The limits of one run, shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..limits import check_limits


@dataclass(frozen=True)
class RunSpec:
    """Everything a backend needs to build its command line.

    Paths are absolute and resolved, so that a symlink cannot make a backend
    expose more than asked.
    """

    argv: list[str]
    scratch: Path
    readonly: list[Path] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    memory_mb: int = 2048
    cpus: float = 1.0
    pids: int = 256

    def __post_init__(self) -> None:
        """A limit that does not bound (NaN, infinite, zero, negative) is refused here,
        before any backend makes a cgroup or starts a process."""
        check_limits(
            timeout_s=self.timeout_s, memory_mb=self.memory_mb, cpus=self.cpus, pids=self.pids
        )

    @property
    def cpu_seconds(self) -> int:
        """RLIMIT_CPU backstop: the wall budget times the CPUs granted, plus slack."""
        return int(self.timeout_s * max(self.cpus, 1.0)) + 5
