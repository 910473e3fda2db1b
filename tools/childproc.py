"""A helper command (pip) that can never outlive torchport, nor its time limit.

torchport is often stopped from outside: a CI job's timeout, the benchmark's, ``kill``.
A plain ``subprocess.run`` child is then re-parented to init and runs on (a ``pip
install --dry-run`` that backtracks ran for 20 minutes after its torchport was
killed). So, as the sandbox's watchdog does for program runs, the child asks the
kernel for SIGKILL when the thread that started it dies (``PR_SET_PDEATHSIG``; the
waiting happens in that thread), and it leads its own process group, which is killed
whole when its time runs out or the wait is interrupted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Callable

from ..sandbox.hostpython import private_cwd

PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None]:
    """What the child runs before exec; libc is looked up here, in the parent, because
    loading a library between fork and exec can deadlock a threaded parent. The process's
    own symbols hold libc's ``prctl``: ``ctypes.util.find_library`` would start
    ``ldconfig``, a child of its own."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # torchport died before the line above took effect
            os._exit(1)

    return set_death_signal


def run_bounded(
    argv: list[str], env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end (text output captured); past ``timeout_s`` seconds its whole
    process group is killed and ``subprocess.TimeoutExpired`` raised."""
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=private_cwd(),  # the user's folder may be a repository: nothing resolves there
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_death_signal_setter(),
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # the time limit, or torchport itself being stopped (SIGINT)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
