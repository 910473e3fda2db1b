"""Spawn a (wrapped) command with limits, a wall clock and bounded output capture.

Shared by every backend: a backend only decides the command line and how to
stop what it started; this module enforces the rest the same way for all.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .cgroup import make_cgroup
from .spec import RunSpec

TAIL_BYTES = 64 * 1024


@dataclass
class RawRun:
    """What the runner saw; backends turn it into an IsolationResult."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    elapsed_s: float
    oom_killed: bool = False


def _drain(stream, buf: bytearray, cap: int) -> None:
    """Read a pipe to its end, keeping only the last ``cap`` bytes."""
    for chunk in iter(lambda: stream.read1(65536), b""):
        buf += chunk
        if len(buf) > cap:
            del buf[: len(buf) - cap]


def _set_rlimits(spec: RunSpec) -> None:
    """Per-process limits; inherited across exec by the sandboxed program."""
    mem = spec.memory_mb * 2**20
    for res, value in (
        (resource.RLIMIT_DATA, mem),
        (resource.RLIMIT_NPROC, spec.pids),
        (resource.RLIMIT_CPU, spec.cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(res, (value, value))


def run_command(
    cmd: list[str],
    spec: RunSpec,
    *,
    rlimits: bool = True,
    cgroup: bool = True,
    on_timeout: Callable[[], None] | None = None,
    cwd: str | None = None,
) -> RawRun:
    """Run ``cmd`` under ``spec``'s limits; on timeout kill the whole tree.

    The tree is the new session (process group) plus, where cgroups are
    writable, every process in the run's cgroup, so children that call
    setsid() are caught too. ``on_timeout`` lets a backend stop things the
    runner cannot see (a container).
    """
    group = (
        make_cgroup(memory_mb=spec.memory_mb, pids=spec.pids, cpus=spec.cpus) if cgroup else None
    )

    def preexec() -> None:
        if group is not None:
            group.join()
        if rlimits:
            _set_rlimits(spec)

    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=spec.env,
        cwd=cwd or str(spec.scratch),
        start_new_session=True,
        preexec_fn=preexec,
    )
    out, err = bytearray(), bytearray()
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, out, TAIL_BYTES), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, err, TAIL_BYTES), daemon=True),
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        if on_timeout is not None:
            on_timeout()
    finally:
        # Whatever happened, nothing the program started outlives the run.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if group is not None:
            group.kill()
        proc.wait()
        for t in readers:
            t.join(timeout=2)
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
    elapsed = time.monotonic() - start
    oom = group.oom_killed() if group is not None else False
    if group is not None:
        group.remove()
    return RawRun(
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        timed_out=timed_out,
        elapsed_s=elapsed,
        oom_killed=oom,
    )


def kill_reason(raw: RawRun, *, wrapped: bool) -> str | None:
    """Why the run was stopped, from the runner's view; None if it just exited.

    ``wrapped`` backends (bwrap, unshare, docker) report a child's death by
    signal N as exit status 128+N.
    """
    if raw.timed_out:
        return "timeout"
    if raw.oom_killed:
        return "memory"
    sig = -raw.returncode if raw.returncode < 0 else 0
    if wrapped and 128 < raw.returncode < 128 + 65:
        sig = raw.returncode - 128
    if not sig:
        return None
    if sig == signal.SIGXCPU:
        return "cpu-time"
    try:
        return f"signal {signal.Signals(sig).name}"
    except ValueError:
        return f"signal {sig}"
