"""Keep torchport's own credentials out of reach of the programs it runs.

The sandbox never passes a key to a program (env.safe_env), but a program that
shares torchport's user (the ``process`` backend) could still read it where
Linux shows it: ``/proc/<torchport pid>/environ`` (the environment block the
process started with) and ``/proc/<pid>/mem``. So every torchport process,
first thing, makes itself non-dumpable (same-uid processes without
CAP_SYS_PTRACE can then read neither file) and blanks the values of
credential-like variables in that initial block, after moving each live value
to the heap with setenv, so that torchport's ``os.environ`` and the children it
starts keep working. Side effect: a same-user debugger (py-spy, gdb) can no
longer attach to torchport without CAP_SYS_PTRACE.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

from .env import looks_secret

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
# /proc/<pid>/stat fields (1-based) bounding the initial environment block.
_ENV_START_FIELD, _ENV_END_FIELD = 50, 51


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _environment_block() -> tuple[int, int]:
    """Start and end address of this process's initial environment block."""
    stat = Path("/proc/self/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # fields from the 3rd on; comm may hold spaces
    return int(fields[_ENV_START_FIELD - 3]), int(fields[_ENV_END_FIELD - 3])


def _make_undumpable(libc: ctypes.CDLL) -> None:
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _blank_secret_values(libc: ctypes.CDLL) -> list[str]:
    """Blank credential-like values in the initial block; the names blanked."""
    start, end = _environment_block()
    if not 0 < start < end:
        return []
    block = (ctypes.c_char * (end - start)).from_address(start)
    libc.getenv.restype = ctypes.c_void_p
    blanked = []
    offset = 0
    for entry in bytes(block).split(b"\0"):
        name, eq, value = entry.partition(b"=")
        value_at = start + offset + len(name) + 1
        offset += len(entry) + 1
        if not (eq and value.strip(b"\0") and looks_secret(os.fsdecode(name))):
            continue
        live = libc.getenv(name)
        if live is not None and start <= live < end:
            # still the variable's live value: setenv copies it to the heap first
            os.putenv(name, ctypes.string_at(live))
        ctypes.memset(value_at, 0, len(value))
        blanked.append(os.fsdecode(name))
    return blanked


def hide_own_secrets() -> list[str]:
    """Hide this process's credentials from other processes of its user.

    Idempotent and harmless where it cannot be done (it logs why). Returns the
    names of the variables whose initial-block values it blanked.
    """
    try:
        libc = _libc()
        _make_undumpable(libc)
        names = _blank_secret_values(libc)
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("torchport could not hide its credentials from other processes: %s", exc)
        return []
    if names:
        log.debug("blanked in /proc/%d/environ: %s", os.getpid(), ", ".join(names))
    return names
