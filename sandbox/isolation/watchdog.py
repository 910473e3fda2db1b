"""The direct child of torchport in every sandboxed run: the run dies with torchport.

    python -I -S watchdog.py CONFIG_JSON      (started by runner.run_command)

torchport can be SIGKILLed (the OOM killer, ``kill -9``, a CI job's timeout) and a
dead process cleans nothing up, so this small process does it: the kernel sends
it SIGTERM when torchport's thread that started it dies (PR_SET_PDEATHSIG), and
as a child subreaper it inherits every orphan of the run, so a setsid() or
double-forked daemon is still its descendant. It stays outside the run's cgroup,
so a cgroup kill or an OOM kill in the run cannot take it first. Stdlib only, no
site, for a fast start; beyond the stdlib it imports only its stdlib-only
siblings ``cgroup`` and ``owner``.

It starts the backend's command in a new session, with the run's rlimits and in
the run's cgroup, and waits. When the command ends, when asked to stop (SIGTERM,
SIGINT, SIGHUP) or at its own deadline (a backstop: the runner's wall clock
comes first), it kills the command's process group, every remaining descendant
and the cgroup's processes, runs the backend's stop commands (``docker kill``)
if the command did not end by itself, and, when torchport is gone, the orphan
cleanup too: ``docker rm``, the cgroup's directories, the run's scratch folder.
It exits as the command did (a death by signal N is a death by N), so the
runner reads the command's status from it.

CONFIG_JSON: ``parent`` (torchport's pid), ``argv``, ``deadline_s``, ``rlimits``
([[resource, value], ...]), ``cgroup`` (null or {"dirs": [...], "v2": bool}),
``stop`` and ``orphaned`` (lists of argv), ``remove`` (folders to delete when
orphaned).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # appended: the stdlib wins any clash
import cgroup  # the sibling module, now importable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
WATCHED = {*STOP_SIGNALS, signal.SIGCHLD}
# How long killing the tree may take before it is given up (forks race the kills).
KILL_ROUNDS_S = 10.0
COMMAND_TIMEOUT_S = 60
# The longest single wait for a signal (an infinite deadline still wakes up).
WAKE_S = 60.0
CANNOT_START = 127


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _start(config: dict, group: cgroup.Cgroup | None) -> int:
    """Fork and exec the command: its own session, limits, cgroup; dies if we die."""
    argv, watchdog = config["argv"], os.getpid()
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != watchdog:
            raise ProcessLookupError("the watchdog died")
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; exec keeps that
            signal.signal(sig, signal.SIG_DFL)
        if group is not None:
            group.join()
        for res, value in config["rlimits"]:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(res, (value, value))
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.execvp(argv[0], argv)
    except BaseException as exc:
        os.write(2, f"torchport sandbox: cannot start {argv[0]!r}: {exc}\n".encode())
    finally:
        os._exit(CANNOT_START)


def _reap(statuses: dict[int, int]) -> None:
    """Collect every child that has ended (orphans of the run included)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = status


def _wait(child: int, deadline: float, statuses: dict[int, int]) -> bool:
    """Until the command ends (False) or we are asked to stop or time runs out (True)."""
    while child not in statuses:
        left = deadline - time.monotonic()
        if not left > 0:  # NaN included
            return True
        info = signal.sigtimedwait(WATCHED, min(left, WAKE_S))
        if info is not None and info.si_signo in STOP_SIGNALS:
            return True
        _reap(statuses)
    return False


def _descendants() -> list[int]:
    """Live (not zombie) processes below this one, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state not in ("Z", "X"):
            children.setdefault(int(ppid), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _kill_tree(child: int, group: cgroup.Cgroup | None, statuses: dict[int, int]) -> None:
    """SIGKILL the command's session, every descendant and the cgroup, until none is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child, signal.SIGKILL)
    give_up = time.monotonic() + KILL_ROUNDS_S
    while time.monotonic() < give_up:
        left = _descendants()
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
        _reap(statuses)
    if group is not None:
        group.kill()
    _reap(statuses)


def _run_all(commands: list[list[str]]) -> None:
    import subprocess

    for argv in commands:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip


def _remove_orphaned(config: dict, group: cgroup.Cgroup | None) -> None:
    """torchport is gone: remove what it would have removed after the run."""
    import owner  # the sibling module (stdlib only), needed only here

    _run_all(config["orphaned"])
    if group is not None:
        group.remove()
    for folder in config["remove"]:
        owner.remove_tree(Path(folder))


def _exit_like(status: int | None) -> None:
    """End as the command did: its exit code, or death by the same signal."""
    code = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGTERM
    if code >= 0:
        os._exit(code)
    sig = -code
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os._exit(128 + sig)  # a signal whose default is not to terminate


def main(config: dict) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    # torchport may have died before the line above: then no signal will ever come.
    parent_alive = os.getppid() == config["parent"]
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    spec = config["cgroup"]
    group = cgroup.Cgroup([Path(d) for d in spec["dirs"]], spec["v2"]) if spec else None
    statuses: dict[int, int] = {}
    status = None
    if parent_alive:
        child = _start(config, group)
        try:
            stopped = _wait(child, time.monotonic() + config["deadline_s"], statuses)
        except Exception as exc:  # whatever went wrong, the run must not be left behind
            os.write(2, f"torchport watchdog: {exc!r}; stopping the run\n".encode())
            stopped = True
        _kill_tree(child, group, statuses)
        if child not in statuses:
            statuses[child] = os.waitpid(child, 0)[1]
        status = statuses[child]
        if stopped:
            _run_all(config["stop"])
    if os.getppid() != config["parent"]:
        _remove_orphaned(config, group)
    _exit_like(status)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
