"""The results channel: how the numbers of a sandboxed run reach torchport.

A verdict rests on the losses, steps and outputs a run produced, and the program must not
be able to choose them. A result file in a folder the program can write would let it
(write ``{"status": "ok", "losses": [...]}`` and ``os._exit(0)``), and so would a report
assembled from the program's own process at its end (edit the list of losses, then let
torchport report it). So:

* torchport listens on a Unix socket of the run's before the sandbox starts, and the
  launcher connects to it first thing, before any code of the program is imported
  (``python -I``: nothing of the program's folder is on its path). That first connection
  is the only one torchport takes as the launcher's.
* every number is sent the moment torchport's hooks record it (a loss at ``backward()``,
  a step after ``optimizer.step()``), not at the end: editing torchport's records
  afterwards changes nothing that was sent, and ``os._exit`` before the launcher's last
  message leaves a run that ended without its report, which fails.
* what the host reads is bounded (bytes, messages, connections) and checked against a
  schema (``sandbox.channel_schema``); anything malformed makes that process's result a
  failure with the reason, never an exception in torchport.

Processes the program starts (``torchrun`` ranks, ``mp.spawn`` children) connect to the
same socket from their own bootstrap. The program could connect too, so their numbers
are only as trustworthy as a program that does not attack torchport (see docs/security.md,
*What a verdict rests on*); the launcher's own are not open to that.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .channel_schema import STREAMED, check_end, check_summary

SOCKET_NAME = "results.sock"
ROLES = ("launcher", "rank", "child")
# Bounds on what one run may send: far above any real run's (a few thousand steps of a
# verification; the largest report, a kernel site check's outputs and gradients, is about
# 4 MiB), far below what would tire the host.
MAX_BYTES_PER_PROCESS = 64 * 2**20
MAX_LINE = MAX_BYTES_PER_PROCESS
MAX_CONNECTIONS = 512
MAX_LOSSES = 200_000
MAX_OUTPUTS = 64
Progress = Callable[[dict[str, Any]], None]


@contextlib.contextmanager
def _at(folder: Path | str) -> Iterator[str]:
    """The socket's address through ``/proc/self/fd``: a Unix socket's path is limited to
    108 bytes, and a test's temporary folder is often longer than that."""
    fd = os.open(str(folder), os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{SOCKET_NAME}"
    finally:
        os.close(fd)


# --- the host's side --------------------------------------------------------------------


@dataclass
class ProcessRecord:
    """What one process of the run sent: its numbers as they came, and its last report."""

    role: str = ""
    pid: int | None = None
    rank: int | None = None
    losses: list[float | None] = field(default_factory=list)
    steps: int = 0
    forwards: int = 0
    outputs: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    received: int = 0

    def result(self) -> dict[str, Any]:
        """The process's result as the harness merges them: the report's fields, the
        numbers from the stream (never the report's), a failure when something was wrong."""
        out: dict[str, Any] = dict(self.end or {})
        out.update(
            losses=[math.nan if v is None else v for v in self.losses],
            steps=self.steps,
            forwards=self.forwards,
            outputs=self.outputs,
        )
        if out.get("rank") is None and self.rank is not None:
            out["rank"] = self.rank
        if self.problems:
            out.update(status="failed", exit_code=out.get("exit_code") or 1)
            out["error"] = {
                "type": "ResultsChannel",
                "message": "; ".join(self.problems)[:2000],
                "frame": None,
            }
        elif self.end is None:
            out.update(status="failed", exit_code=1)
            out["error"] = {
                "type": "NoResult",
                "message": (
                    "the process ended before torchport could report its end "
                    "(killed, or left through os._exit)"
                ),
                "frame": None,
            }
        return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Feed:
    """One connection: bytes in, messages applied to its record."""

    def __init__(self, record: ProcessRecord, progress: Progress | None) -> None:
        self.record, self.progress, self.pending = record, progress, bytearray()
        self.closed = False

    def take(self, chunk: bytes) -> None:
        record = self.record
        record.received += len(chunk)
        if record.received > MAX_BYTES_PER_PROCESS:
            self.fail(f"sent over {MAX_BYTES_PER_PROCESS} bytes on the results channel")
            return
        if b"\n" not in chunk:  # a long message arrives in many chunks: no re-split each time
            self.pending += chunk
            if len(self.pending) > MAX_LINE:
                self.fail("sent a message longer than the results channel allows")
            return
        *lines, last = (bytes(self.pending) + chunk).split(b"\n")
        self.pending = bytearray(last)
        for line in lines:
            if self.closed:
                return
            try:
                message = json.loads(line)
            except ValueError:
                self.fail("sent a message that is not JSON")
                return
            self.apply(message)

    def fail(self, problem: str) -> None:
        self.record.problems.append(problem)
        self.closed = True

    def apply(self, message: Any) -> None:
        record = self.record
        if not isinstance(message, dict) or not isinstance(message.get("t"), str):
            return self.fail("sent a message without a kind")
        kind = message["t"]
        if record.role == "" and kind != "hello":
            return self.fail("sent numbers before saying who it is")
        handler = _HANDLERS.get(kind)
        if handler is None:
            return self.fail(f"sent a message of unknown kind {kind[:40]!r}")
        problem = handler(record, message)
        if problem:
            return self.fail(problem)
        if kind == "step" and self.progress is not None and record.rank in (None, 0):
            last = record.losses[-1] if record.losses else None
            with contextlib.suppress(Exception):  # a view only: never the run's problem
                self.progress({"step": record.steps, "loss": last})


def _hello(record: ProcessRecord, m: dict[str, Any]) -> str | None:
    if record.role:
        return "said who it is twice"
    if m.get("role") not in ROLES or not isinstance(m.get("pid"), int):
        return "said who it is in a malformed message"
    if m.get("rank") is not None and not isinstance(m.get("rank"), int):
        return "sent a malformed rank"
    record.role, record.pid, record.rank = m["role"], m["pid"], m.get("rank")
    return None


def _loss(record: ProcessRecord, m: dict[str, Any]) -> str | None:
    value = m.get("v")
    if value is not None and not _number(value):
        return "sent a loss that is not a number"
    if len(record.losses) >= MAX_LOSSES:
        return f"sent over {MAX_LOSSES} losses"
    record.losses.append(None if value is None or not math.isfinite(value) else float(value))
    return None


def _counter(name: str) -> Callable[[ProcessRecord, dict[str, Any]], str | None]:
    """Steps and forward calls arrive one at a time, each the count so far."""

    def apply(record: ProcessRecord, m: dict[str, Any]) -> str | None:
        if m.get("n") != getattr(record, name) + 1:
            return f"sent {name} out of order"
        setattr(record, name, m["n"])
        return None

    return apply


def _output(record: ProcessRecord, m: dict[str, Any]) -> str | None:
    if len(record.outputs) >= MAX_OUTPUTS:
        return None  # the budget keeps the first ones only, as before
    summary = check_summary(m.get("s"))
    if summary is None:
        return "sent a malformed output summary"
    record.outputs.append(summary)
    return None


def _end(record: ProcessRecord, m: dict[str, Any]) -> str | None:
    if record.end is not None:
        return "reported its end twice"
    end, problem = check_end(m.get("result"))
    if problem:
        return problem
    record.end = end
    return None


_HANDLERS: dict[str, Callable[[ProcessRecord, dict[str, Any]], str | None]] = {
    "hello": _hello,
    "loss": _loss,
    "step": _counter("steps"),
    "forward": _counter("forwards"),
    "output": _output,
    "end": _end,
}


class Collector:
    """The host's end of one run's channel: listens in ``folder`` and reads every
    connection in a thread of its own until :meth:`close`."""

    def __init__(self, folder: Path, progress: Progress | None = None) -> None:
        self.folder = folder
        self.records: list[ProcessRecord] = []
        self.refused = 0
        self._progress = progress
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        with _at(folder) as address:
            self._listener.bind(address)
        # docker's root (no capabilities) connects as another user than torchport's
        os.chmod(folder / SOCKET_NAME, 0o666)
        self._listener.listen(64)
        self._listener.setblocking(False)
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._serve,), daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ, None)
            sel.register(self._stop_r, selectors.EVENT_READ, "stop")
            while True:
                for key, _ in sel.select():
                    if key.data == "stop":
                        self._drain(sel)
                        return
                    if key.data is None:
                        self._accept(sel)
                    else:
                        self._read(sel, key.fileobj, key.data)

    def _accept(self, sel: selectors.BaseSelector) -> bool:
        """Take one waiting connection (False when none was waiting)."""
        try:
            conn, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return False
        if len(self.records) >= MAX_CONNECTIONS:
            self.refused += 1
            conn.close()
            return True
        conn.setblocking(False)
        record = ProcessRecord()
        self.records.append(record)
        sel.register(conn, selectors.EVENT_READ, _Feed(record, self._progress))
        return True

    def _read(self, sel: selectors.BaseSelector, conn: Any, feed: _Feed) -> None:
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk and not feed.closed:
            feed.take(chunk)
        if not chunk or feed.closed:
            sel.unregister(conn)
            conn.close()

    def _drain(self, sel: selectors.BaseSelector) -> None:
        """After the run: the connections still waiting to be taken (in the order they
        came), what is still buffered in each, then close them."""
        while self._accept(sel):
            pass
        for key in list(sel.get_map().values()):
            if isinstance(key.data, _Feed) and isinstance(key.fileobj, socket.socket):
                conn, feed = key.fileobj, key.data
                with contextlib.suppress(OSError):
                    while not feed.closed and (chunk := conn.recv(65536)):
                        feed.take(chunk)
                conn.close()

    def close(self) -> list[ProcessRecord]:
        """Stop listening (every process of the run is gone by now); the records."""
        os.write(self._stop_w, b"x")
        self._thread.join()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        self._listener.close()
        with contextlib.suppress(OSError):
            (self.folder / SOCKET_NAME).unlink()
        if self.refused:
            for record in self.records:
                record.problems.append(
                    f"{self.refused} more connection(s) to the results channel than allowed"
                )
        return self.records


# --- the run's side ---------------------------------------------------------------------


class Reporter:
    """A process's sender: connects (now, or at its first message), says who it is, and
    sends each number as it is recorded. One per process; a forked child starts its own."""

    def __init__(self, folder: str, role: str, rank: Callable[[], int | None]) -> None:
        self.folder, self.role, self._rank = folder, role, rank
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.broken: str | None = None

    def connect(self) -> None:
        """Connect and say who this is; raises OSError when the channel cannot be reached."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with _at(self.folder) as address:
                sock.connect(address)
            hello = {"t": "hello", "role": self.role, "pid": os.getpid(), "rank": self._rank()}
            sock.sendall(_line(hello))
        except OSError:
            sock.close()
            raise
        self._sock = sock

    def send(self, kind: str, **fields: Any) -> None:
        """Send one message; a channel that cannot be reached is noted, not raised: the
        host then has no report of this process, which fails it."""
        with self._lock:
            if self.broken is not None:
                return
            try:
                if self._sock is None:
                    self.connect()
                assert self._sock is not None
                self._sock.sendall(_line({"t": kind, **fields}))
            except OSError as exc:
                self.broken = f"the results channel could not be reached: {exc}"

    def end(self, result: dict[str, Any]) -> None:
        """The process's last report (its numbers went as they came: not again)."""
        self.send("end", result={k: v for k, v in result.items() if k not in STREAMED})

    def after_fork(self) -> None:
        """In a forked child: the parent's connection is the parent's; start afresh."""
        self._lock = threading.Lock()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()  # this process's copy only: no shutdown, the parent's stays
        self._sock, self.broken = None, None


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, default=str).encode() + b"\n"
