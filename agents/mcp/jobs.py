"""Run one job in a worker process (``worker``), relay its progress, honour cancellation.

A cancelled call (the client's ``notifications/cancelled``) cancels the awaiting task;
then the worker's whole process group is killed, and the call returns only once nothing
of the job is left: the worker reaped, and every sandboxed run it started gone (their
watchdogs end them when the worker dies; they are found by the worker's tag, which names
each run's scratch folder). The server itself never runs the user's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process
from torchport.sandbox.hostpython import private_cwd, python_command
from torchport.sandbox.isolation import owner

# -I: the served repository (often the working folder) cannot stand in for torchport
WORKER = python_command("-m", "torchport.agents.mcp.worker")
# How long the runs of a killed worker may take to go (their watchdogs kill and clean up).
CLEANUP_S = 60.0


class JobFailed(RuntimeError):
    """The job ran and failed (its message says why), or the worker died without answering."""


async def run_job(job: dict[str, Any], report: Callable[[str], Awaitable[None]]) -> Any:
    """The job's result; ``report`` gets each progress message as it comes."""
    process = await anyio.open_process(
        WORKER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,  # the server's own standard error: the client's log
        start_new_session=True,  # one process group, killed as one
        cwd=private_cwd(),
    )
    tag = _tag(process.pid)
    answer: dict[str, Any] | None = None
    try:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(json.dumps(job).encode() + b"\n")
        await process.stdin.aclose()
        async for message in _messages(process.stdout):
            if "progress" in message:
                await report(str(message["progress"]))
            else:
                answer = message
        await process.wait()
    finally:
        if process.returncode is None:  # cancelled, or the relay failed
            with anyio.CancelScope(shield=True):
                left = await _stop(process, tag)
            gone = f"still running after {CLEANUP_S:.0f} s: {left}" if left else "gone"
            print(
                f"torchport mcp: {job['kind']} stopped; its worker and runs are {gone}",
                file=sys.stderr,
                flush=True,
            )
    if answer is None:
        raise JobFailed(
            f"the worker ended without an answer (exit {process.returncode}); "
            "the server's standard error says why"
        )
    if "error" in answer:
        raise JobFailed(str(answer["error"]))
    return answer["result"]


async def _messages(stream: ByteReceiveStream) -> AsyncIterator[dict[str, Any]]:
    """The worker's JSON lines, whatever the chunks they arrive in."""
    pending = b""
    async for chunk in stream:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _tag(pid: int) -> str | None:
    try:
        return owner.tag(pid)
    except ProcessLookupError:  # it has exited already: it started nothing
        return None


async def _stop(process: Process, tag: str | None) -> list[int]:
    """Kill the worker's process group, reap it, and wait until its runs are gone; what
    is still running after ``CLEANUP_S``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    if tag is None:
        return []
    with anyio.move_on_after(CLEANUP_S):
        while processes_of(tag):
            await anyio.sleep(0.1)
    return processes_of(tag)


def processes_of(tag: str) -> list[int]:
    """Live processes whose command line names a scratch folder of the worker ``tag``: a
    sandboxed run's watchdog and isolation wrapper do."""
    needle = f"{owner.RUN_PREFIX}{tag}-".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found
