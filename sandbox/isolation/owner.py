"""Which torchport process owns a leftover: a tag in the names of its temp folders,
cgroups and containers.

A SIGKILLed torchport cleans nothing up, so the next one must tell a dead run's
leftovers from a live run's. A pid alone is not enough (pids are reused), so the
tag also holds the process's start time (``/proc/PID/stat`` field 22, clock ticks
since boot) and its pid namespace: a torchport in another pid namespace (a
container sharing /tmp or the docker daemon) cannot be judged from here, and its
leftovers are left alone.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from pathlib import Path

# The harness's scratch folders (a full copy of the repository each).
RUN_PREFIX = "torchport-run-"
# pid-starttime-pidns, as written by ``tag()``.
TAG = r"(?P<pid>\d+)-(?P<start>\d+)-(?P<ns>\d+)"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it has exited
    (a zombie has: it only waits for its parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields resume after the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


@functools.cache
def _pid_namespace() -> int:
    return os.stat("/proc/self/ns/pid").st_ino


def tag(pid: int | None = None) -> str:
    """``PID-STARTTIME-PIDNS`` of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    start = start_time(pid)
    if start is None:
        raise ProcessLookupError(f"no process {pid}")
    return f"{pid}-{start}-{_pid_namespace()}"


def is_gone(match: re.Match[str]) -> bool:
    """Whether the owner named by a ``TAG`` match has exited (False when it cannot be told).

    Only an owner in this pid namespace can be judged; a live pid with another start
    time is a reused pid, so the owner is gone.
    """
    if int(match["ns"]) != _pid_namespace():
        return False
    return start_time(int(match["pid"])) != int(match["start"])


def temp_dir() -> tempfile.TemporaryDirectory[str]:
    """A scratch folder named with this process's tag, so a sweep can tell when it is stale."""
    return tempfile.TemporaryDirectory(prefix=f"{RUN_PREFIX}{tag()}-")


def owns(path: Path) -> bool:
    """Whether ``path`` is a scratch folder of this process (made by ``temp_dir``)."""
    return path.name.startswith(f"{RUN_PREFIX}{tag()}-")


def remove_tree(path: Path) -> None:
    """Delete a scratch folder, even parts the program made unreadable (chmod 000).

    Each pass gives back the permissions that stopped the last one, one level deeper.
    """

    def unlock(_func: object, name: str, _exc: object) -> None:
        for p in (os.path.dirname(name), name):
            with contextlib.suppress(OSError):
                if not os.path.islink(p):
                    os.chmod(p, 0o700)

    for _ in range(32):
        if not os.path.lexists(path):
            return
        shutil.rmtree(path, onerror=unlock)
