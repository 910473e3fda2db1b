"""A sandboxed run as the agents pass it around: the harness's ``RunResult.to_json``.

Typed so a misspelt key is an error where it is read, not a ``None`` three calls later;
``total=False`` because a run that never started (``run_program``'s ``RunError``) or a
record trimmed for the report (``judging._brief``) carries only some of the keys. Nested
records whose shape the harness does not fix (counters, per-rank rows) stay mappings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from .site_records import SiteCalls, SiteCheckReport
from .trace_records import TraceReport


class FrameRecord(TypedDict, total=False):
    """The user's frame a failure happened in."""

    file: str
    line: int | None
    function: str | None
    code: str | None  # None: a frame found by name, without its source line


class ErrorRecord(TypedDict, total=False):
    """A failed run's error: the exception's type (or a ``FailureKind``) and message."""

    type: str
    message: str
    frame: FrameRecord | None
    traceback: str


class RepairJSON(TypedDict):
    """One failure of the original repaired (``legacy_repair.Repair.to_json``); tuples in
    the process, lists once read back from a checkpoint."""

    signature: str
    path: str
    line: int
    expressions: Sequence[str]
    before: str
    after: str
    lines: Sequence[tuple[str, int]]
    port_lines: Sequence[tuple[str, int, str, str]]


class OutputStats(TypedDict, total=False):
    """One output of an inference program (``sandbox.budget.summarize``)."""

    shape: list[int]
    mean: float
    std: float
    abs_max: float


# The statistics two outputs are compared by (sandbox.channel_schema.SUMMARY_FIELDS).
OUTPUT_STATS: tuple[Literal["mean", "std", "abs_max"], ...] = ("mean", "std", "abs_max")


class RunRecord(TypedDict, total=False):
    """One run of a program (``sandbox.harness.RunResult.to_json``), plus what the agents add:
    ``cached`` (read from the reference cache), ``legacy_repairs`` (``agents.legacy_repair``)."""

    status: str  # ok | failed | timeout | killed
    exit_code: int | None
    losses: list[float]
    steps: int
    forwards: int
    outputs: list[OutputStats]
    counters: dict[str, Any]
    error: ErrorRecord | None
    stopped: str | None
    stdout_tail: str
    stderr_tail: str
    elapsed_s: float | None
    isolation: str
    mode: str
    synthetic_data: list[dict[str, Any]]
    standin_modules: list[str]
    network: list[str]
    reference_standins: list[str]
    reference_interpreters: list[dict[str, Any]]
    cuda_kernel_runner: list[dict[str, Any]]
    ranks: list[dict[str, Any]]
    command_rewrites: list[dict[str, str]]
    command_kept: list[dict[str, str]]
    phases: dict[str, float]
    kernel_site_calls: list[SiteCalls]
    site_check: SiteCheckReport
    module_trace: TraceReport
    cached: bool
    legacy_repairs: list[RepairJSON]


def failed_with(
    run: RunRecord, kind: str, message: str, frame: FrameRecord | None = None
) -> RunRecord:
    """``run`` as the failure a diagnosis reads: its error is the verifier's judgement
    (a ``FailureKind``), not the exception the program raised (it raised none)."""
    return {**run, "error": {"type": kind, "message": message, "frame": frame}}


class EnvironmentRecord(TypedDict, total=False):
    """The packages the runs see (``agents.environment.prepare_environment``): the
    dependency overlay (``tools.depinstall.Overlay.to_json``), the interpreter ``--python``
    named (``python``, ``torch``, ``site_paths``) and the ported copies of installed
    libraries (``patched_site``, ``agents.library_patch``); empty for ``--deps none``."""

    path: str | None
    prefix: str | None
    key: str
    installed: list[str]
    unavailable: dict[str, str]  # distribution -> why it could not be installed
    skipped: list[dict[str, str]]
    present: list[str]
    import_names: dict[str, str]  # import name -> distribution
    notes: list[str]
    hidden: list[str]
    cached: bool
    elapsed_s: float
    python: str
    torch: str | None
    site_paths: list[str]
    patched_site: str
