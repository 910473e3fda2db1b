"""Where a batch's jobs run: fresh local processes, or tasks on a Ray cluster.

Both executors have one interface: ``run(specs, started)`` keeps at most ``jobs``
repositories in flight, calls ``started(spec)`` as each one is launched (the
driver journals it) and yields ``(spec, record)`` as each finishes, in whatever
order they finish. A job whose process dies (killed for memory, a crash in
native code) yields a record saying so; the others carry on.

The local executor starts one spawned process per repository rather than using
a ``ProcessPoolExecutor``: when a pool's worker dies the whole pool breaks and
every repository in flight is lost with it, without saying which one died.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
from collections.abc import Callable, Generator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from torchport.sandbox.hostpython import spawn_children_safely

from . import job
from .job import JobRecord, JobSpec

Started = Callable[[JobSpec], None]
Jobs = Generator[tuple[JobSpec, JobRecord], None, None]  # closing it stops the jobs
CLUSTER_EXTRA = "pip install 'torchport[cluster]'"


class ExecutorError(RuntimeError):
    """The executor cannot start (Ray not installed, cluster unreachable)."""


class Executor(Protocol):
    name: str
    jobs: int

    def run(self, specs: Sequence[JobSpec], started: Started) -> Jobs: ...


class LocalExecutor:
    """Each repository in a fresh spawned process (spawn: torch's threads survive no fork)."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.jobs = max(1, jobs)

    def run(self, specs: Sequence[JobSpec], started: Started) -> Jobs:
        spawn_children_safely()  # no module of the working folder stands in for the stdlib's
        context = multiprocessing.get_context("spawn")
        queue = list(specs)
        running: dict[Connection, tuple[JobSpec, Any]] = {}
        try:
            while queue or running:
                while queue and len(running) < self.jobs:
                    spec = queue.pop(0)
                    reader, writer = context.Pipe(duplex=False)
                    # not a daemon: a job's scan may use worker processes of its own
                    process = context.Process(
                        target=_child, args=(spec, writer), name=f"torchport-batch:{spec.name}"
                    )
                    started(spec)
                    process.start()
                    writer.close()  # the child holds the only writer: its death is our EOF
                    running[reader] = (spec, process)
                ready = wait(list(running))
                for reader in [r for r in list(running) if r in ready]:
                    spec, process = running.pop(reader)
                    try:
                        record = reader.recv()
                    except (EOFError, OSError):
                        record = None
                    reader.close()
                    process.join()
                    if record is None:
                        record = job.crashed(spec, _death(process.exitcode))
                    yield spec, record
        finally:  # the batch was interrupted (or failed): no orphan jobs
            for _, process in running.values():
                process.kill()
                process.join()


def _child(spec: JobSpec, writer: Connection) -> None:
    # Ctrl-C reaches the whole process group: the driver stops the jobs itself, so a
    # job must not die of it first and be filed as a failure. (A handler, not SIG_IGN,
    # so that the programs the job runs get the default back.)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    writer.send(job.main(spec))
    writer.close()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        how = f"killed by signal {-exitcode}" + (" (out of memory?)" if exitcode == -9 else "")
    else:
        how = f"exit status {exitcode}"
    return f"the job's process died without a result ({how}); see logs/"


class RayExecutor:
    """The same jobs as Ray tasks: on a cluster (``address``) or a local instance."""

    name = "ray"

    def __init__(self, jobs: int, address: str | None = None) -> None:
        self.jobs = max(1, jobs)
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._ray = _import_ray()

    def run(self, specs: Sequence[JobSpec], started: Started) -> Jobs:
        ray = self._ray
        os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")  # offline by default
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        try:
            if self.address:
                _reachable(self.address)
                ray.init(address=self.address, **quiet)
            else:
                ray.init(num_cpus=self.jobs, include_dashboard=False, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ExecutorError(f"cannot start Ray ({self.address or 'local'}): {exc}") from exc
        # max_calls=1: a fresh worker process per repository, as locally; no retries: a
        # repository that fails is reported, and a batch rerun is the retry.
        task = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(job.main)
        queue = list(specs)
        pending: dict[Any, JobSpec] = {}
        try:
            while queue or pending:
                while queue and len(pending) < self.jobs:
                    spec = queue.pop(0)
                    started(spec)
                    pending[task.remote(spec)] = spec
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    spec = pending.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                        record = job.crashed(spec, f"the Ray task failed: {type(exc).__name__}")
                        record["error"] = first
                    yield spec, record
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            ray.shutdown()


def _reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail in seconds, not minutes: Ray retries an unreachable head for a long time."""
    target = address.removeprefix("ray://")
    if target == "auto":
        return
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--ray-address {address!r}: expected HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ExecutorError(f"no Ray cluster answers at {address}: {exc}") from exc


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(f"--executor ray needs Ray: {CLUSTER_EXTRA}") from exc
    return ray


def make_executor(kind: str, jobs: int, address: str | None = None) -> Executor:
    """The executor for ``--executor``; ExecutorError when it cannot be used here."""
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(jobs, address)
    raise ExecutorError(f"unknown executor {kind!r}; choose local or ray")
