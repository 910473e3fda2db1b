"""Spawn a (wrapped) command with limits, a wall clock and bounded output capture.

Shared by every backend: a backend only decides the command line and what to
run to stop and remove what it started (``Teardown``); this module, through the
watchdog it starts, enforces the rest the same way for all.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import owner
from .cgroup import Cgroup, make_cgroup
from .spec import RunSpec

TAIL_BYTES = 64 * 1024
# Called from the reader threads with ("stdout" | "stderr", bytes) as the run writes them.
Echo = Callable[[str, bytes], None]
WATCHDOG = Path(__file__).with_name("watchdog.py")
# The watchdog's own deadline is the run's plus this: a backstop, the runner stops it first.
DEADLINE_GRACE_S = 10.0
# How long the watchdog may take to stop a run (docker kill included) before it is killed.
STOP_WAIT_S = 90.0
# How long the readers may take, once the run ended, to read what it wrote before its end.
# Two seconds lost a spawned worker's last line on a loaded machine (a fresh clone's test
# run); a writer that outlives the run (escaped its group) holds the pipe this long at most.
DRAIN_WAIT_S = 20.0


@dataclass
class RawRun:
    """What the runner saw; backends turn it into an IsolationResult."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    elapsed_s: float
    oom_killed: bool = False


def _drain(
    stream: io.BufferedIOBase, buf: bytearray, cap: int, echo: Echo | None = None, name: str = ""
) -> None:
    """Read a pipe to its end, keeping only the last ``cap`` bytes; pass each chunk to
    ``echo`` as well, if given. An echo that fails is dropped: the capture is the record
    (the verifier reads it), the echo only a view of it, and the pipe must not fill up."""
    for chunk in iter(lambda: stream.read1(65536), b""):
        buf += chunk
        if len(buf) > cap:
            del buf[: len(buf) - cap]
        if echo is not None:
            try:
                echo(name, chunk)
            except Exception:
                echo = None


def _rlimits(spec: RunSpec) -> list[tuple[int, int]]:
    """Per-process limits; inherited across exec by the sandboxed program."""
    return [
        (resource.RLIMIT_DATA, spec.memory_mb * 2**20),
        (resource.RLIMIT_NPROC, spec.pids),
        (resource.RLIMIT_CPU, spec.cpu_seconds),
        (resource.RLIMIT_CORE, 0),
    ]


@dataclass(frozen=True)
class Teardown:
    """What a backend leaves that killing processes does not stop, for the watchdog.

    ``stop``: commands run when the run is stopped early (``docker kill NAME``);
    ``orphaned``: commands run when torchport died during the run (``docker rm``);
    ``remove``: scratch folders of this process (``owner.temp_dir``) deleted then.
    """

    stop: tuple[tuple[str, ...], ...] = ()
    orphaned: tuple[tuple[str, ...], ...] = ()
    remove: tuple[Path, ...] = ()


def _watchdog_argv(
    cmd: list[str], spec: RunSpec, group: Cgroup | None, rlimits: bool, teardown: Teardown
) -> list[str]:
    """The watchdog's command line: everything it needs travels in it, as JSON."""
    config = {
        "parent": os.getpid(),
        "argv": cmd,
        "deadline_s": spec.timeout_s + DEADLINE_GRACE_S,
        "rlimits": _rlimits(spec) if rlimits else [],
        "cgroup": None if group is None else {"dirs": [str(d) for d in group.dirs], "v2": group.v2},
        "stop": teardown.stop,
        "orphaned": teardown.orphaned,
        "remove": [str(p) for p in teardown.remove],
    }
    return [sys.executable, "-I", "-S", str(WATCHDOG), json.dumps(config)]


def _stop(proc: subprocess.Popen) -> None:
    """Ask the watchdog to stop the run; kill it if it does not finish in time."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_command(
    cmd: list[str],
    spec: RunSpec,
    *,
    rlimits: bool = True,
    cgroup: bool = True,
    teardown: Teardown = Teardown(),
    cwd: str | None = None,
    echo: Echo | None = None,
) -> RawRun:
    """Run ``cmd`` under ``spec``'s limits through the watchdog; on timeout kill the tree.

    The watchdog (``watchdog.py``) is the process started here; it starts ``cmd``
    and kills all of the run when the run ends, when told to, or when torchport
    dies, whichever comes first. The tree is the new session, every descendant
    (the watchdog is their subreaper, so daemons are caught) and, where cgroups
    are writable, every process in the run's cgroup. Waiting happens in the
    calling thread, the one the watchdog's death signal is tied to. ``echo`` sees the
    run's output as it comes (``torchport run`` shows it), besides the captured tail.
    """
    for folder in teardown.remove:  # the watchdog deletes only folders named for us
        if not owner.owns(folder):
            raise ValueError(f"not a scratch folder of this process: {folder}")
    group = (
        make_cgroup(owner=owner.tag(), memory_mb=spec.memory_mb, pids=spec.pids, cpus=spec.cpus)
        if cgroup
        else None
    )
    try:
        argv = _watchdog_argv(cmd, spec, group, rlimits, teardown)
        raw = _supervise(argv, spec, group, cwd, echo)
        raw.oom_killed = group.oom_killed() if group is not None else False
    finally:
        if group is not None:
            group.remove()
    return raw


def _supervise(
    argv: list[str], spec: RunSpec, group: Cgroup | None, cwd: str | None, echo: Echo | None
) -> RawRun:
    """Start the watchdog, read its output, stop it at the wall clock."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=spec.env,
        cwd=cwd or str(spec.scratch),
        start_new_session=True,
    )
    out, err = bytearray(), bytearray()
    readers = [
        threading.Thread(target=_drain, args=(pipe, buf, TAIL_BYTES, echo, name), daemon=True)
        for pipe, buf, name in ((proc.stdout, out, "stdout"), (proc.stderr, err, "stderr"))
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Whatever happened (a timeout, an exception here), nothing of the run outlives it;
        # the cgroup is for a watchdog that was itself killed.
        _stop(proc)
        if group is not None:
            group.kill()
        for t in readers:
            t.join(timeout=DRAIN_WAIT_S)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    return RawRun(
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        timed_out=timed_out,
        elapsed_s=time.monotonic() - start,
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
