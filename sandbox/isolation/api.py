"""``run_isolated``: pick a backend, build the command, run it, explain the result."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..limits import check_limits
from . import bwrap, docker, process, unshare
from .env import safe_env
from .result import BackendUnavailable, IsolationResult, IsolationWarning
from .runner import Echo, Teardown, kill_reason, run_command
from .secrets import hide_own_secrets
from .spec import RunSpec
from .sweep import sweep_once

log = logging.getLogger(__name__)

# Strongest first: "auto" takes the first one that works here.
BACKENDS = ("bwrap", "docker", "unshare", "process")
_MODULES = {"bwrap": bwrap, "docker": docker, "unshare": unshare, "process": process}


def backend_status() -> dict[str, str | None]:
    """Each backend mapped to None (usable here) or the reason it is not."""
    return {name: _MODULES[name].unavailable() for name in BACKENDS}


def choose_backend(backend: str = "auto") -> str:
    """Resolve ``"auto"`` to the strongest usable backend; check a named one."""
    if backend == "auto":
        # Probed in order and no further than needed: each probe starts a process (docker
        # asks its daemon), and every torchport command that runs a program pays for them.
        skipped: dict[str, str] = {}
        for name in BACKENDS:
            reason = _MODULES[name].unavailable()
            if reason is None:
                log.info("sandbox backend: %s (unavailable: %s)", name, skipped or "none")
                return name
            skipped[name] = reason
        raise BackendUnavailable(f"no sandbox backend can run here: {skipped}")
    if backend not in _MODULES:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose from {BACKENDS} or 'auto'")
    reason = _MODULES[backend].unavailable()
    if reason is not None:
        raise BackendUnavailable(f"sandbox backend {backend!r} unavailable: {reason}")
    return backend


def run_isolated(
    argv: Sequence[str],
    *,
    scratch: Path,
    readonly: Sequence[Path] = (),
    env: dict[str, str] | None = None,
    timeout_s: float,
    memory_mb: int,
    cpus: float = 1,
    pids: int = 256,
    backend: str = "auto",
    owned: Path | None = None,
    echo: Echo | None = None,
) -> IsolationResult:
    """Run untrusted ``argv`` with no network, bounded time/memory/processes,
    no secrets in its environment, and writes only to ``scratch``.

    ``scratch`` (created if missing) is the working directory and HOME, and
    appears at the same path inside the sandbox, as do the ``readonly`` paths;
    the running Python and its venv are always visible read-only. ``env`` adds
    variables on top of :func:`safe_env` (credential-like names are refused);
    the parent's environment is never inherited. ``backend="auto"`` takes the
    strongest available (``result.backend`` says which); naming a backend that
    cannot run raises :class:`BackendUnavailable`. The ``process`` backend does
    not isolate and warns with :class:`IsolationWarning`.

    The run dies with this process, whatever kills it (see ``watchdog``); then
    ``owned``, a scratch folder of this process made by ``owner.temp_dir`` (the
    run's copy of a repository), is deleted too. The first run of a process
    sweeps what killed runs left (``sweep``). ``echo`` is passed the run's output as it
    comes (``("stdout" | "stderr", bytes)``), besides the tail kept in the result.
    """
    # Limits first: a bad one (NaN, zero) is refused before anything is made or probed.
    check_limits(timeout_s=timeout_s, memory_mb=memory_mb, cpus=cpus, pids=pids)
    name = choose_backend(backend)
    scratch = Path(scratch).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    spec = RunSpec(
        argv=[str(a) for a in argv],
        scratch=scratch,
        readonly=[Path(p).resolve() for p in readonly],
        env=safe_env(env, home=scratch, cpus=cpus),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        cpus=cpus,
        pids=pids,
    )
    sweep_once()
    remove = (Path(owned),) if owned is not None else ()
    if name == "docker":
        docker.ensure_image()
        cname = docker.new_name()
        teardown = Teardown(
            stop=(docker.kill_command(cname),),
            orphaned=(docker.remove_command(cname),),
            remove=remove,
        )
        raw = run_command(
            docker.command(spec, cname),
            spec,
            rlimits=False,
            cgroup=False,
            teardown=teardown,
            echo=echo,
        )
        raw.oom_killed = docker.finish(cname)
    else:
        if name == "process":
            hide_own_secrets()  # the program shares our user: our keys out of its reach
            warnings.warn(process.WARNING, IsolationWarning, stacklevel=2)
            log.warning(process.WARNING)
        command = _MODULES[name].command(spec)
        raw = run_command(command, spec, teardown=Teardown(remove=remove), echo=echo)
    return IsolationResult(
        returncode=raw.returncode,
        stdout=raw.stdout,
        stderr=raw.stderr,
        timed_out=raw.timed_out,
        killed=kill_reason(raw, wrapped=name != "process"),
        backend=name,
        elapsed_s=round(raw.elapsed_s, 3),
    )
