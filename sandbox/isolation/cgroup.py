"""Per-run cgroups: the only pids/memory/CPU limit that binds a root-owned process.

RLIMIT_NPROC never applies to uid 0 (the kernel exempts the root user, even
inside a user namespace), so when torchport runs as root a fork bomb is only
contained by a pids cgroup. A cgroup also lets a timeout kill every process
the program started, including ones that left its session. Used when the
cgroup filesystem is writable (root, v1 or v2); otherwise backends fall back
to rlimits, which do bind non-root users.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str | None) -> str:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (None: v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller in names.split(",")):
            return path.lstrip("/")
    raise OSError(f"no cgroup line for {controller or 'v2'}")


class Cgroup:
    """A throwaway cgroup (one directory per controller on v1, one on v2)."""

    def __init__(self, *, memory_mb: int, pids: int, cpus: float) -> None:
        self.dirs: list[Path] = []
        self.v2 = (_ROOT / "cgroup.controllers").exists()
        name = f"torchport-{uuid.uuid4().hex[:12]}"
        try:
            if self.v2:
                d = _ROOT / _own_path(None) / name
                d.mkdir()
                self.dirs.append(d)
                (d / "pids.max").write_text(str(pids))
                (d / "memory.max").write_text(str(memory_mb * 2**20))
                with contextlib.suppress(OSError):
                    (d / "memory.swap.max").write_text("0")
                (d / "cpu.max").write_text(f"{int(cpus * 100_000)} 100000")
            else:
                limits = {
                    "pids": {"pids.max": str(pids)},
                    "memory": {"memory.limit_in_bytes": str(memory_mb * 2**20)},
                    "cpu": {
                        "cpu.cfs_period_us": "100000",
                        "cpu.cfs_quota_us": str(int(cpus * 100_000)),
                    },
                }
                for ctrl, files in limits.items():
                    d = _ROOT / ctrl / _own_path(ctrl) / name
                    d.mkdir()
                    self.dirs.append(d)
                    for fname, value in files.items():
                        (d / fname).write_text(value)
        except OSError:
            self.remove()
            raise

    def join(self) -> None:
        """Move the calling process in; called in the child before exec."""
        pid = str(os.getpid())
        for d in self.dirs:
            (d / "cgroup.procs").write_text(pid)

    def pids(self) -> list[int]:
        """Processes still inside (any controller directory will do)."""
        try:
            return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]
        except (OSError, IndexError):
            return []

    def kill(self) -> None:
        """SIGKILL everything inside, until nothing is left (forks race the loop)."""
        if self.v2 and self.dirs:
            with contextlib.suppress(OSError):
                (self.dirs[0] / "cgroup.kill").write_text("1")
        for _ in range(50):
            left = self.pids()
            if not left:
                return
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed something in this cgroup."""
        for d in self.dirs:
            for fname in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError):
                    for line in (d / fname).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and int(value) > 0:
                            return True
        return False

    def remove(self) -> None:
        """Kill what is left and delete the directories."""
        self.kill()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.dirs = []


def make_cgroup(*, memory_mb: int, pids: int, cpus: float) -> Cgroup | None:
    """A cgroup with these limits, or None where cgroups cannot be written."""
    if os.geteuid() != 0:
        return None
    try:
        return Cgroup(memory_mb=memory_mb, pids=pids, cpus=cpus)
    except OSError:
        return None
