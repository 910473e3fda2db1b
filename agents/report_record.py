"""``verification.json``'s top level, named: what ``deliver.verification_record`` writes
and the report page, verification.md and the chat's /report read.

A TypedDict names its keys without changing a byte: the record stays a plain dict.
"""

from __future__ import annotations

from typing import Any, TypedDict

from .run_record import EnvironmentRecord
from .state import AgentEdit, PlanRecord
from .verification_records import VerificationRecord


class SandboxUsed(TypedDict):
    """One isolation backend the verification's runs had, and what it isolates."""

    backend: str
    runs: list[str]  # original, migrated
    isolates: str


class ReportRecord(TypedDict, total=False):
    """``verification.json``: the run's verdict, its evidence and how it was reached."""

    run_id: str | None
    target: str
    verdict: str
    verification: VerificationRecord | None
    iterations: int
    plan: PlanRecord | None
    decisions: list[dict[str, Any]]  # state.decision's: node, decision and its own details
    agent_edits: list[AgentEdit]
    llm_usage: dict[str, float]
    elapsed_s: float
    sandbox: list[SandboxUsed]
    environment: EnvironmentRecord
