"""The rewriter: every change to the code, as an overlay on the source tree.

Deterministic first: the catalogue's codemods make the first overlay. What is
left goes to the LLM, one construct or one failure at a time, through the AST
edit tools only (``agents.llm.tools``), in a materialised scratch copy whose
changed files are read back into the overlay. Nothing here touches the user's
repository.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchport.tools.migrate import MigrateOptions, migrate

from .workspace import changed_files, materialize

if TYPE_CHECKING:
    from .llm.client import LLMClient

SPAN_CONTEXT = 3  # lines either side of a failing line the LLM is shown as its span
# How far from its span an LLM edit may reach (imports excepted): a construct is one
# statement; a failure's cause is near the failing line, not across the file.
WINDOW = {"construct": 2, "failure": 12}


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
    target_file = work / request["path"]
    before = target_file.read_text(encoding="utf-8") if target_file.is_file() else ""
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
    after = target_file.read_text(encoding="utf-8") if target_file.is_file() else ""
    strayed = outside_window(
        before, after, request["start_line"], request["end_line"], WINDOW[request["kind"]]
    )
    if strayed:  # the scratch copy is rebuilt from the overlay next time: nothing to undo
        record.update(status="rejected", error=f"edit outside the problem's lines: {strayed}")
        record["rejected_edits"], record["edits"] = record["edits"], []
        return overlay, record
    touched = {e.path for e in outcome.edits}
    updated = dict(overlay)
    updated.update(changed_files(source, work, touched))
    return updated, record


def construct_request(item: dict[str, Any], target: str) -> dict[str, Any]:
    """A catalogue finding marked ``llm`` as a repair request: exactly its lines.

    Only the rule's one-line hint goes with it: a small model shown a doc page's
    example copies the example instead of fixing the code in front of it.
    """
    return {
        "kind": "construct",
        "target": target,
        "path": item["path"],
        "start_line": int(item["line"]),
        "end_line": int(item.get("end_line") or item["line"]),
        "problem": f"{item['rule']}: {item['message']}",
        "context": f"Suggested approach: {item.get('hint', '')}",
    }


def outside_window(before: str, after: str, start: int, end: int, margin: int) -> str | None:
    """Why an edit strays from lines ``start..end`` (+- margin), or None if it does not.

    Import lines may be added or removed anywhere (a replacement needs its imports
    and leaves the CUDA library's unused); any other change outside the window is
    the model rewriting code it was not asked about.
    """
    old, new = before.splitlines(), after.splitlines()
    low, high = start - margin, end + margin
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, old, new, autojunk=False
    ).get_opcodes():
        if tag == "equal":
            continue
        inside = low - 1 <= i1 <= high if i1 == i2 else (i1 + 1 >= low and i2 <= high)
        if inside:  # old lines i1+1..i2 (1-based), or an insertion after line i1
            continue
        changed = [*old[i1:i2], *new[j1:j2]]
        if all(_is_import(line) for line in changed):
            continue
        return f"changed lines {i1 + 1}-{max(i2, i1 + 1)}, outside {max(1, low)}-{high}"
    return None


def _is_import(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith(("import ", "from "))


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
