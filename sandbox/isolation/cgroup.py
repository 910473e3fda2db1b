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


# The hierarchies a run's cgroup lives in on v1 (v2 has one).
_V1_CONTROLLERS = ("pids", "memory", "cpu")
PREFIX = "torchport-"
# how long removing a run's cgroup waits for its killed processes to be gone
REMOVE_WAIT_S = 15.0


def _is_v2() -> bool:
    return (_ROOT / "cgroup.controllers").exists()


def _parents(v2: bool) -> list[Path]:
    """Where this process makes its cgroups: beside itself, in each hierarchy."""
    if v2:
        return [_ROOT / _own_path(None)]
    return [_ROOT / ctrl / _own_path(ctrl) for ctrl in _V1_CONTROLLERS]


def _limits(v2: bool, *, memory_mb: int, pids: int, cpus: float) -> list[dict[str, str]]:
    """The files to write in each of ``_parents(v2)``'s new directories, in that order."""
    memory, quota = str(memory_mb * 2**20), str(int(cpus * 100_000))
    if v2:
        return [{"pids.max": str(pids), "memory.max": memory, "cpu.max": f"{quota} 100000"}]
    return [
        {"pids.max": str(pids)},
        {"memory.limit_in_bytes": memory},
        {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": quota},
    ]


class Cgroup:
    """A throwaway cgroup (one directory per controller on v1, one on v2).

    Plain data (its directories) so that the watchdog, a separate process, can
    kill and remove the cgroup its parent made.
    """

    def __init__(self, dirs: list[Path], v2: bool) -> None:
        self.dirs = list(dirs)
        self.v2 = v2

    @classmethod
    def create(cls, name: str, *, memory_mb: int, pids: int, cpus: float) -> Cgroup:
        """Make ``name`` beside this process's cgroup, with these limits."""
        v2 = _is_v2()
        group = cls([], v2)
        try:
            limits = _limits(v2, memory_mb=memory_mb, pids=pids, cpus=cpus)
            for parent, files in zip(_parents(v2), limits, strict=True):
                d = parent / name
                d.mkdir()
                group.dirs.append(d)
                for fname, value in files.items():
                    (d / fname).write_text(value)
                if v2:
                    with contextlib.suppress(OSError):
                        (d / "memory.swap.max").write_text("0")
        except OSError:
            group.remove()
            raise
        return group

    def join(self) -> None:
        """Move the calling process in; the watchdog's child calls it before exec."""
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
        """Kill what is left and delete the directories.

        A directory cannot go while a process is in it, and a SIGKILLed process with a large
        address space (torch, gigabytes) can take seconds to be torn down on a loaded
        machine: a fixed second of retries left cgroups behind under load. So the kills and
        the removal are retried until ``REMOVE_WAIT_S`` has passed."""
        deadline = time.monotonic() + REMOVE_WAIT_S
        for d in self.dirs:
            while True:
                self.kill()
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
        self.dirs = []


def make_cgroup(*, owner: str, memory_mb: int, pids: int, cpus: float) -> Cgroup | None:
    """A cgroup with these limits, or None where cgroups cannot be written.

    Named ``torchport-OWNER-HEX``: a sweep tells a dead owner's leftover by its name.
    """
    if os.geteuid() != 0:
        return None
    try:
        name = f"{PREFIX}{owner}-{uuid.uuid4().hex[:12]}"
        return Cgroup.create(name, memory_mb=memory_mb, pids=pids, cpus=cpus)
    except OSError:
        return None


def torchport_cgroups() -> dict[str, Cgroup]:
    """Every ``torchport-*`` cgroup beside this process's, by name (what a sweep inspects)."""
    found: dict[str, list[Path]] = {}
    v2 = _is_v2()
    try:
        for parent in _parents(v2):
            for d in parent.glob(f"{PREFIX}*"):
                if d.is_dir():
                    found.setdefault(d.name, []).append(d)
    except OSError:
        return {}
    return {name: Cgroup(dirs, v2) for name, dirs in found.items()}
