"""The two runs of a verification, started together when the machine has room, and timed.

The original's run (on the CUDA reference shim) and the migration's (on the emulated
device) share nothing but their inputs, and each is bound to one CPU (the sandbox's
thread counts, and its cgroup's quota where it can make one) and to ``memory_mb``.
Most of each run is the single-threaded import of torch and a small program, so two
cores overlap them almost completely: on a 2-core machine (shared with other work) a
verification of the bundled example whose original was not cached took 0.52x the
wall time of the two runs one after the other (17.6 s against 33.8 s,
``benchmarks/verify_phases.py``). With one core they would only take turns, and
without memory for both at their limit the second could push the first into it, so
there they run one after the other.

What each phase took goes into the verdict's ``timings`` (``verification.json``), so a
slow verification says where its time went: getting the reference (run, read from the
cache or given by an earlier round), each run's sandbox start-up, program and teardown,
the comparison.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .run_record import RunRecord
from .verification_records import RunTiming, Timings

MEMINFO = Path("/proc/meminfo")
# The harness's phases (sandbox.harness.PHASES) that are start-up, before the program.
START_UP = ("prepare", "sandbox", "interpreter", "activation")


@dataclass(frozen=True)
class Schedule:
    """Whether the two runs start together, and why (the reason goes into the timings)."""

    together: bool
    why: str


def memory_available_mb(meminfo: Path = MEMINFO) -> int | None:
    """The kernel's estimate of memory available without swapping (``MemAvailable``), or
    None where it gives none (not Linux, a kernel before 3.14)."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                return int(value.split()[0]) // 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def cores() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def schedule(memory_mb: int, available_mb: int | None, cpus: int) -> Schedule:
    """Together only with a core for each run and memory for both at their limit."""
    if cpus < 2:
        return Schedule(False, f"one after the other: {cpus} CPU core, each run uses one")
    if available_mb is None:
        return Schedule(False, "one after the other: the available memory is unknown")
    if available_mb < 2 * memory_mb:
        return Schedule(
            False,
            f"one after the other: {available_mb} MB available, each run may take {memory_mb}",
        )
    return Schedule(True, f"together: {cpus} CPU cores, {available_mb} MB available")


@dataclass
class Pair:
    """Both runs' results, and the wall time of each call (a cache read is one too)."""

    reference: RunRecord
    migrated: RunRecord
    reference_s: float = 0.0
    migrated_s: float = 0.0


def _timed(call: Callable[[], RunRecord]) -> tuple[RunRecord, float]:
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def run_both(
    reference: Callable[[], RunRecord],
    migrated: Callable[[], RunRecord],
    together: bool,
) -> Pair:
    """Call both; ``reference`` in a thread of its own when ``together``, with the caller's
    context (a langgraph node's stream writer only works inside its run's context). The
    thread is a daemon: a verification interrupted in the main thread does not wait for
    the original's run, whose watchdog ends it when the thread dies with the process."""
    if not together:
        ref, ref_s = _timed(reference)
        result, result_s = _timed(migrated)
        return Pair(ref, result, ref_s, result_s)
    box: dict[str, Any] = {}

    def run_reference() -> None:
        try:
            box["result"] = _timed(reference)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(
        target=contextvars.copy_context().run, args=(run_reference,), daemon=True
    )
    thread.start()
    result, result_s = _timed(migrated)
    thread.join()
    if "error" in box:
        raise box["error"]
    ref, ref_s = box["result"]
    return Pair(ref, result, ref_s, result_s)


def serialised(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` for two runs' progress threads: one message at a time."""
    lock = threading.Lock()

    def locked(message: str) -> None:
        with lock:
            say(message)

    return locked


def run_timing(result: RunRecord, seconds: float) -> RunTiming:
    """One run's wall time in the verification, its phases and their start-up total."""
    timing: RunTiming = {"seconds": round(seconds, 3)}
    phases = dict(result.get("phases") or {})
    if phases:
        timing["start_up_s"] = round(sum(phases.get(name, 0.0) for name in START_UP), 3)
        timing["phases"] = phases
    return timing


def timings(
    pair: Pair,
    reference_source: str,
    compare_s: float,
    total_s: float,
    plan: Schedule,
    again: tuple[RunRecord, float] | None = None,
) -> Timings:
    """The verdict's ``timings``: its fields are documented and checked in
    ``tests/data/verification.schema.json``. ``reference_source`` is ``run`` (run
    now), ``cache`` (read from the disk cache) or ``given`` (by an earlier round).
    ``again``: the migration's second run, at the TPU's default matmul precision
    (``agents.precision_check``), and its wall time: in ``total_s``, not in ``compare_s``,
    and shown on its own so its cost is seen."""
    if reference_source == "run":
        reference = run_timing(pair.reference, pair.reference_s)
        runs = "together" if plan.together else "one after the other"
    else:
        reference = {"seconds": round(pair.reference_s, 3)}
        runs = "migration only"
    return {
        "total_s": round(total_s, 3),
        "runs": runs,
        "schedule": plan.why,
        "reference": {"source": reference_source, **reference},
        "migrated": run_timing(pair.migrated, pair.migrated_s),
        "compare_s": round(compare_s, 3),
        **({"default_precision": run_timing(*again)} if again is not None else {}),
    }
