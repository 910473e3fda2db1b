"""The agent graph's state: small, typed, plain data, so every checkpoint is JSON-able.

Files are carried as an overlay (changed path -> text) on the untouched source
tree rather than as a folder the nodes mutate: a node that is re-run after a
kill starts from the checkpointed overlay and reaches the same result.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


class Settings(TypedDict, total=False):
    source: str  # the original repository (read only)
    target: str
    select: list[str]  # --rules
    entry: str | None  # --entry
    verify: bool
    steps: int
    timeout_s: float
    memory_mb: int
    isolation: str
    deps: str  # --deps: auto, none, or a requirements file
    python: str | None  # --python: an interpreter whose packages the runs may use
    max_iterations: int  # rewrite -> verify rounds after the first
    max_llm_tokens: int
    max_wall_s: float
    llm: str  # the --llm flag as given ("none", "local", "auto", a URL)
    # Where the result goes (tools.migrate.MigrateOptions): written only by the report node.
    out: str | None
    in_place: bool
    branch: str | None
    force: bool
    annotate: bool
    dry_run: bool


class State(TypedDict, total=False):
    settings: Settings
    plan: dict[str, Any]
    overlay: dict[str, str]  # repo-relative path -> migrated text, changed files only
    iteration: int  # verify rounds done
    reference: dict[str, Any] | None  # the original's run, made once
    environment: dict[str, Any] | None  # the dependency overlay the runs use, made once
    verification: dict[str, Any] | None  # the latest verdict
    diagnosis: dict[str, Any] | None
    next_fix: dict[str, Any] | None  # what the rewriter should try next
    decisions: Annotated[list[dict[str, Any]], operator.add]  # every node's choices, in order
    agent_edits: list[dict[str, Any]]  # edits beyond the codemods, in the current overlay
    # The best migration so far (overlay, agent_edits, verification, rank): a repair that
    # makes things worse is undone, and the report delivers the best, not the last.
    best: dict[str, Any] | None
    llm_usage: dict[str, Any]
    elapsed_s: Annotated[float, operator.add]
    outcome: str  # the final verdict


def decision(node: str, what: str, **details: Any) -> dict[str, Any]:
    """One line of the report's decision log."""
    return {"node": node, "decision": what, **details}
