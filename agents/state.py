"""The agent graph's state: small, typed, plain data, so every checkpoint is JSON-able.

Files are carried as an overlay (changed path -> text) on the untouched source
tree rather than as a folder the nodes mutate: a node that is re-run after a
kill starts from the checkpointed overlay and reaches the same result.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

from .kernel_records import FallbackRecord
from .repair_records import AgentEdit, PlanItem, RepairRequestRecord
from .run_record import EnvironmentRecord, RunRecord
from .verification_records import VerificationRecord


class Settings(TypedDict, total=False):
    source: str  # the original repository (read only)
    target: str
    select: list[str]  # --rules
    skip: list[str]  # --skip and the project's config: rules never applied nor reported
    exclude: list[str]  # --exclude and the project's config: files never reported nor rewritten
    entry: str | None  # --entry
    verify: bool
    steps: int
    timeout_s: float
    devices: int  # --devices: what device_count() answers in both runs (RunLimits.devices)
    keep_args: bool  # --keep-args: the programs' size and time arguments left as given
    run_id: str  # the run's id, as the front door chose it (its folder, its checkpoints)
    memory_mb: int
    isolation: str
    deps: str  # --deps: auto, none, or a requirements file
    tolerance: dict[str, Any]  # --tolerance and the project's config (tolerance.policies_for)
    python: str | None  # --python: an interpreter whose packages the runs may use
    max_iterations: int  # rewrite -> verify rounds after the first
    max_llm_tokens: int
    max_wall_s: float
    llm: str  # the --llm flag as given ("none", "local", "auto", a URL)
    # Where the result goes (tools.migrate.MigrateOptions): written only by the deliver node.
    out: str | None
    in_place: bool
    branch: str | None
    force: bool
    annotate: bool
    dry_run: bool
    safe_only: bool  # --safe-only: only the fixes that cannot change results


def scan_filters(settings: Any) -> dict[str, tuple[str, ...]]:
    """The rules and files a run leaves alone (``skip``, ``exclude``), as the scanner's and
    the migration's options take them: every scan of a run reads the same files."""
    return {k: tuple(settings.get(k) or ()) for k in ("skip", "exclude")}


class PlanRecord(TypedDict, total=False):
    """The planner's ``Plan`` as checkpointed (``Plan.to_json``)."""

    entry: list[str] | None  # the command the verifier runs; None when not runnable
    entry_reason: str
    not_runnable: str | None  # why nothing can be run (then no verification)
    rejected: list[dict[str, str]]
    auto: int  # findings the codemods fix
    llm: list[PlanItem]  # findings for the LLM
    manual: list[PlanItem]  # findings for a human


FixKind = Literal["rules", "llm", "constructs", "improve"]


class DiagnosisRecord(TypedDict, total=False):
    """``diagnose.Diagnosis.to_json``: what went wrong in a run and who should fix it."""

    signature: str
    cause: str
    rules: list[str]
    action: str  # rules | llm | human | none
    file: str | None
    line: int | None
    evidence: str
    hint: str
    target: str
    matched_in: str
    limitation: bool


class NextFix(TypedDict, total=False):
    """What diagnose asks the next rewrite round to do; one of three kinds.

    ``rules``: apply ``files`` (the rules' result, computed once by diagnose);
    ``llm``: send ``request`` to the model; ``constructs``: ask the model about the
    ``items`` catalogue constructs still in the migration; ``improve``: send ``request``,
    a PyTorch version of a kernel call site a verified port runs through a fallback.
    """

    kind: FixKind
    rules: list[str]
    files: dict[str, str]
    request: RepairRequestRecord
    items: int


class Best(TypedDict):
    """The best migration so far, which a worse repair is rolled back to."""

    overlay: dict[str, str]
    agent_edits: list[AgentEdit]
    verification: VerificationRecord
    rank: int
    iteration: int


class State(TypedDict, total=False):
    settings: Settings
    plan: PlanRecord
    plan_scan: str | None  # the file in the run's folder holding the plan's scan (save_scan)
    overlay: dict[str, str] | None  # repo-relative path -> migrated text, changed files only
    iteration: int  # verify rounds done
    reference: RunRecord | None  # the original's run, made once
    environment: EnvironmentRecord | None  # the dependency overlay the runs use, made once
    verification: VerificationRecord | None  # the latest verdict
    diagnosis: DiagnosisRecord | None
    next_fix: NextFix | None  # what the rewriter should try next
    decisions: Annotated[list[dict[str, Any]], operator.add]  # every node's choices, in order
    agent_edits: list[AgentEdit]  # edits beyond the codemods, in the current overlay
    # The best migration so far (overlay, agent_edits, verification, rank): a repair that
    # makes things worse is undone, and the report delivers the best, not the last.
    best: Best | None
    # The kernel call site whose replacement this round verifies (agents.kernel_improve):
    # held to the fallback port too, and dropped, keeping the fallback, if it fails
    improving: FallbackRecord | None
    llm_usage: dict[str, float]  # llm.client.Usage.to_json: calls, tokens, retries, seconds
    elapsed_s: Annotated[float, operator.add]
    outcome: str  # the final verdict


def decision(node: str, what: str, **details: Any) -> dict[str, Any]:
    """One line of the report's decision log."""
    return {"node": node, "decision": what, **details}
