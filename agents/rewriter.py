"""The rewriter: every change to the code, as an overlay on the source tree.

Deterministic first: the catalogue's codemods make the first overlay. What is
left goes to the LLM, one construct or one failure at a time, through the AST
edit tools only (``agents.llm.tools``), in a materialised scratch copy whose
changed files are read back into the overlay. Nothing here touches the user's
repository.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchport.tools.migrate import MigrateOptions, migrate

from .workspace import changed_files, materialize

if TYPE_CHECKING:
    from .llm.client import LLMClient

SPAN_CONTEXT = 3  # lines either side of a construct the LLM is shown as its span


def codemods(
    source: Path, target: str, select: list[str], annotate: bool = False
) -> tuple[dict[str, str], dict[str, Any]]:
    """The catalogue's automatic fixes for ``target``: the first overlay and a summary."""
    result = migrate(
        source,
        MigrateOptions(target=target, select=tuple(select), dry_run=True, annotate=annotate),
    )
    overlay = {c.path: c.after for c in result.changes}
    summary = {
        "edits": len(result.edits),
        "files": sorted(overlay),
        "left_for_humans": len(result.left_for_humans),
    }
    return overlay, summary


def apply_rules(
    source: Path, overlay: dict[str, str], work: Path, target: str, rules: list[str]
) -> dict[str, str]:
    """Run the named rules' codemods again over the current migration.

    A runtime failure can point at a construct the first pass left (a rule
    deselected with ``--rules``, a file it could not rewrite); the result is the
    new overlay, equal to the old one when the codemods find nothing more.
    """
    materialize(source, overlay, work)
    result = migrate(work, MigrateOptions(target=target, select=tuple(rules), dry_run=True))
    updated = dict(overlay)
    for change in result.changes:
        updated[change.path] = change.after
    return updated


def llm_repair(
    client: LLMClient,
    source: Path,
    overlay: dict[str, str],
    work: Path,
    request: dict[str, Any],
    *,
    max_turns: int,
    max_tokens: int | None,
    verify: Any = None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """One LLM repair in a scratch copy; returns the new overlay and the repair's record."""
    from .llm.repair import RepairRequest, repair
    from .llm.tools import Workspace

    materialize(source, overlay, work)
    outcome = repair(
        RepairRequest(**request),
        Workspace(work),
        client,
        verify=verify,
        max_turns=max_turns,
        max_tokens_total=max_tokens,
    )
    record = {
        "request": request,
        "status": outcome.status,
        "summary": outcome.summary,
        "turns": outcome.turns,
        "usage": outcome.usage,
        "error": outcome.error,
        "edits": [asdict(e) for e in outcome.edits],
    }
    if not outcome.edits or outcome.status not in ("edited",):
        return overlay, record
    touched = {e.path for e in outcome.edits}
    updated = dict(overlay)
    updated.update(changed_files(source, work, touched))
    return updated, record


def construct_request(item: dict[str, Any], target: str, doc: str = "") -> dict[str, Any]:
    """A catalogue finding marked ``llm`` as a repair request."""
    line = int(item["line"])
    return {
        "kind": "construct",
        "target": target,
        "path": item["path"],
        "start_line": max(1, line - SPAN_CONTEXT),
        "end_line": line + SPAN_CONTEXT,
        "problem": f"{item['rule']}: {item['message']}",
        "context": f"Suggested approach: {item.get('hint', '')}\n{doc}".strip(),
    }


def failure_request(
    diagnosis: dict[str, Any], verification: dict[str, Any], target: str
) -> dict[str, Any] | None:
    """A verifier failure as a repair request, when it points at a file of the program."""
    path, line = diagnosis.get("file"), diagnosis.get("line")
    if not path or not line:
        return None
    run = verification.get("failure") or verification.get("target") or {}
    error = run.get("error") or {}
    return {
        "kind": "failure",
        "target": target,
        "path": path,
        "start_line": max(1, int(line) - SPAN_CONTEXT),
        "end_line": int(line) + SPAN_CONTEXT,
        "problem": f"{error.get('type', 'Error')}: {error.get('message', '')}"[:1500],
        "context": (
            f"Diagnosis: {diagnosis.get('cause', 'unknown')}\n"
            f"Traceback tail:\n{(run.get('stderr_tail') or '')[-1200:]}"
        ),
    }
