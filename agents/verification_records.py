"""``verification.json``'s record and its nested parts, named.

``results.Verification.to_json`` writes a ``VerificationRecord``; the graph checkpoints
it, the report and the chat read it back. Each nested part is the JSON of one check's
own dataclass or function (``verify_pair.timings``, ``precision_check.DefaultCheck``,
``legacy_repair.Repair``, ``library_patch.Patch``, ``divergence.Divergence``). TypedDicts
name their keys without changing a byte: the records stay plain dicts at run time, and
``tests/data/verification.schema.json`` still checks the file itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from .kernel_records import FallbackRecord, KernelCheckRecord
from .run_record import RepairJSON, RunRecord


class RunTiming(TypedDict, total=False):
    """One run's wall time (``verify_pair.run_timing``); ``source`` on the reference's."""

    source: str  # run | cache | given
    seconds: float
    start_up_s: float
    phases: dict[str, float]


class Seconds(TypedDict):
    seconds: float


class Timings(TypedDict, total=False):
    """Where the verification's wall time went (``verify_pair.timings``)."""

    total_s: float
    runs: str  # together | one after the other | migration only
    schedule: str
    reference: RunTiming
    migrated: RunTiming
    compare_s: float
    default_precision: RunTiming
    divergence: Seconds


class HighestSummary(TypedDict, total=False):
    """Precision check (a) as the report shows it (``verifier._highest_summary``)."""

    matmul_precision: str
    policy: str
    compared: str
    steps: int
    max_abs: float
    max_rel: float
    holds: bool


class DefaultCheckRecord(TypedDict):
    """Precision check (b) (``precision_check.DefaultCheck.to_json``)."""

    ran: bool
    holds: bool | None
    why: str
    policy: str
    compared: str
    steps: int
    max_abs: float
    max_rel: float
    nonfinite: bool
    stalled: bool
    matmul_ops: int
    per_step: list[dict[str, float]]  # step, highest, default


class PrecisionRecord(TypedDict):
    """The two precision checks of a port (``Verification.precision``)."""

    highest: HighestSummary
    default: DefaultCheckRecord


class PatchJSON(TypedDict):
    """One installed library file ported (``library_patch.Patch.to_json``)."""

    distribution: str
    version: str
    file: str
    edits: int
    diff: str


class RowJSON(TypedDict, total=False):
    """One module call of the divergence table (``divergence.Row``)."""

    index: int
    name: str
    cls: str
    where: str
    dtypes: Sequence[str]  # original's, port's
    max_abs: float
    max_rel: float
    holds: bool
    input_holds: bool | None
    ops: list[str]
    parent: str | None


class DivergenceRecord(TypedDict, total=False):
    """Where a port first computes otherwise (``divergence.Divergence.to_json``), or only
    ``step``, ``found: unknown`` and the ``summary`` of why it could not be found."""

    step: int
    found: str  # module | gradient | update | unknown
    summary: str
    module: str
    cls: str
    where: str
    blame: str
    port_lines: list[int]
    original_lines: list[int]
    ops: list[str]
    max_abs: float
    max_rel: float
    dtypes: Sequence[str]
    rows: list[RowJSON]
    profile: Sequence[tuple[str, float]]
    weights: str


class ParityRecord(TypedDict, total=False):
    """The losses' or outputs' comparison (``comparison.Parity``'s fields)."""

    compared: str  # losses | outputs | nothing
    steps: int
    max_abs: float
    max_rel: float
    worst_step: int | None
    holds: bool
    per_step: list[dict[str, float]]  # step, reference, target (and rank)
    note: str
    ranks: int


class VerificationRecord(TypedDict, total=False):
    """The verifier's ``Verification`` as checkpointed (``Verification.to_json``)."""

    verdict: str  # verified, failed, not-runnable, ...
    reason: str
    policy: str
    parity: ParityRecord | None
    reference: RunRecord | None
    target: RunRecord | None
    failure: RunRecord | None  # the failing target run, what diagnose reads
    caveat: str
    timings: Timings
    kernel_check: KernelCheckRecord | None  # the differential check at the kernel call sites
    own_policy: str
    loosened: list[str]
    launch: str
    precision: PrecisionRecord | None
    attribution: dict[str, str] | None
    legacy_repairs: list[RepairJSON]
    library_patches: list[PatchJSON]
    next_step: str
    divergence: DivergenceRecord | None
    code: str  # the reason as a stable code (verdicts.Reason)
    fallbacks: list[FallbackRecord]  # kernel call sites the port runs through a fallback
    fallback_check: KernelCheckRecord | None  # a replacement against the fallback port
