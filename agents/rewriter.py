"""The rewriter: every change to the code, as an overlay on the source tree.

Deterministic first: the catalogue's codemods make the first overlay. What is
left goes to the LLM, one construct or one failure at a time, through the AST
edit tools only (``agents.llm.toolbox``), in a materialised scratch copy whose
changed files are read back into the overlay. Nothing here touches the user's
repository.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
from collections.abc import Mapping
from dataclasses import asdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import libcst as cst
from torchport.sandbox import astparse
from torchport.tools.ast_edits import EditRefused, insert_import, remove_unused_imports
from torchport.tools.catalogue import load_catalogue
from torchport.tools.codemods.guard import blocking, removed_imported_names, top_level_names
from torchport.tools.migrate import (
    MigrateOptions,
    MigrationResult,
    computed_migration,
    migrate,
)
from torchport.tools.report.counts import count_constructs
from torchport.tools.scanner import ScanOptions, scan

from .defaults import MAX_TURNS
from .repair_records import CodemodSummary, PlanItem, RepairRecord, RepairRequestRecord
from .state import AgentEdit, DiagnosisRecord, scan_filters
from .workspace import changed_files, materialize, python_sources

if TYPE_CHECKING:
    from .llm.client import LLMClient

SPAN_CONTEXT = 3  # lines either side of a failing line the LLM is shown as its span
# How far from its span an LLM edit may reach (imports excepted): a construct is one
# statement; a failure's cause is near the failing line, not across the file.
WINDOW = {"construct": 2, "failure": 12, "instruction": 2, "kernel": 2}


def _codemod_result(
    source: Path,
    target: str,
    select: list[str],
    annotate: bool,
    run: str | None,
    filters: Mapping[str, tuple[str, ...]],
    safe_only: bool = False,
    scan_file: str | None = None,
) -> MigrationResult:
    options = MigrateOptions(
        target=target,
        select=tuple(select),
        dry_run=True,
        annotate=annotate,
        safe_only=safe_only,
        skip=filters.get("skip", ()),
        exclude=filters.get("exclude", ()),
    )
    return computed_migration(source, options, run, scan_file)


def codemods(
    source: Path,
    target: str,
    select: list[str],
    annotate: bool = False,
    run: str | None = None,
    filters: Mapping[str, tuple[str, ...]] | None = None,
    safe_only: bool = False,
    scan_file: str | None = None,
) -> tuple[dict[str, str], CodemodSummary]:
    """The catalogue's automatic fixes for ``target``: the first overlay and a summary;
    ``filters`` (``state.scan_filters``) are the rules and files the run leaves alone;
    ``scan_file`` the plan's scan (``State.plan_scan``), read instead of scanning again.

    Computed once for ``run``: the report reads the same result (``agents.deliver``)."""
    result = _codemod_result(
        source, target, select, annotate, run, filters or {}, safe_only, scan_file
    )
    overlay = {c.path: c.after for c in result.changes}
    totals = count_constructs(result).totals()
    summary: CodemodSummary = {
        "edits": len(result.edits),
        "files": sorted(overlay),
        "converted": totals["converted"],
        "left_for_humans": totals["left"],
        "advisories": totals["advisory"],
    }
    return overlay, summary


def apply_rules(
    source: Path,
    overlay: dict[str, str],
    work: Path,
    target: str,
    rules: list[str],
    filters: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """Run the named rules' codemods again over the current migration.

    A runtime failure can point at a construct the first pass left (a rule
    deselected with ``--rules``, a file it could not rewrite); the result is the
    new overlay, equal to the old one when the codemods find nothing more. Rules the
    run skips and files it excludes (``filters``) stay as they are.
    """
    materialize(source, overlay, work)
    filters = filters or {}
    options = MigrateOptions(
        target=target,
        select=tuple(rules),
        dry_run=True,
        skip=filters.get("skip", ()),
        exclude=filters.get("exclude", ()),
    )
    result = migrate(work, options)
    updated = dict(overlay)
    for change in result.changes:
        updated[change.path] = change.after
    return updated


def llm_repair(
    client: LLMClient,
    source: Path,
    overlay: dict[str, str],
    work: Path,
    request: RepairRequestRecord,
    *,
    max_turns: int = MAX_TURNS,
    max_tokens: int | None = None,
    verify: Any = None,
) -> tuple[dict[str, str], RepairRecord]:
    """One LLM repair in a scratch copy; returns the new overlay and the repair's record."""
    from .llm.repair import RepairRequest, repair
    from .llm.toolbox import Workspace

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
        # A small local model does better rewriting a given span than driving tools.
        protocol="span" if getattr(client.config, "local", False) else "tools",
    )
    record: RepairRecord = {
        "request": request,
        "status": outcome.status,
        "summary": outcome.summary,
        "turns": outcome.turns,
        "usage": outcome.usage,
        "error": outcome.error,
        "edits": [cast("AgentEdit", asdict(e)) for e in outcome.edits],
    }
    if not outcome.edits or outcome.status not in ("edited",):
        return overlay, record
    after = target_file.read_text(encoding="utf-8") if target_file.is_file() else ""
    strayed = outside_window(
        before, after, request["start_line"], request["end_line"], WINDOW[request["kind"]]
    )
    if strayed:  # the scratch copy is rebuilt from the overlay next time: nothing to undo
        return overlay, reject(record, f"edit outside the problem's lines: {strayed}")
    return _guarded(source, overlay, work, {e.path for e in outcome.edits}, record)


def _guarded(
    source: Path, overlay: dict[str, str], work: Path, touched: set[str], record: RepairRecord
) -> tuple[dict[str, str], RepairRecord]:
    """The overlay with an edit's files, their imports settled, unless the semantic guard
    refuses what it did (then the overlay as it was and the record says why)."""
    updated = dict(overlay)
    for rel, text in changed_files(source, work, touched).items():
        updated[rel], added = with_missing_imports(text, rel)
        if added:
            record["imports_added"] = [*record.get("imports_added", []), *added]
        # the edit replaced the last use of a CUDA-only library: its import goes now (as
        # prune_cuda_imports would after the round), not counted against the edit
        with contextlib.suppress(EditRefused, cst.ParserSyntaxError):
            updated[rel] = remove_unused_imports(updated[rel], cuda_only_modules(), rel)
    broken = introduced_by_edit(source, overlay, updated) or dropped_names(
        source, overlay, updated, work
    )
    if broken:
        return overlay, reject(record, f"refused by the semantic guard: {broken}")
    return updated, record


def reject(record: RepairRecord, why: str) -> RepairRecord:
    """Mark a repair's record as refused, with why; its edits are kept as rejected ones."""
    record["status"], record["error"] = "rejected", why
    record["rejected_edits"], record["edits"] = record["edits"], []
    return record


def introduced_by_edit(source: Path, overlay: dict[str, str], updated: dict[str, str]) -> str:
    """The static findings (pyflakes', a keyword twice) an edit added to the files it
    changed, compared with each file just before it; empty when it added none."""
    found = []
    for rel, text in sorted(updated.items()):
        if not rel.endswith(".py") or text == overlay.get(rel):
            continue
        original = source / rel
        previous = overlay.get(rel)
        if previous is None:
            previous = original.read_text(encoding="utf-8") if original.is_file() else ""
        found += [f"{rel}:{p.line}: {p.message}" for p in blocking(previous, text, rel)]
    return "; ".join(found)


def dropped_names(
    source: Path, overlay: dict[str, str], updated: dict[str, str], work: Path
) -> str:
    """The top-level names an edit removed that other files of the program import (a kernel
    replacement without the wrapper the program calls); empty when it removed none."""
    found: list[str] = []
    others: dict[str, str] | None = None
    for rel, text in sorted(updated.items()):
        if not rel.endswith(".py") or text == overlay.get(rel):
            continue
        previous = overlay.get(rel)
        if previous is None:
            original = source / rel
            previous = original.read_text(encoding="utf-8") if original.is_file() else ""
        if others is None and top_level_names(previous) - top_level_names(text):
            others = python_sources(work)
        if others is not None:
            found += removed_imported_names(rel, previous, text, {**others, **updated})
    return "; ".join(found)


# Names an edit may use without importing them (a model writes `torch.` or `F.` as in
# any PyTorch file): name -> (module, imported name, alias), as insert_import takes them.
KNOWN_IMPORTS: dict[str, tuple[str, str | None, str | None]] = {
    "torch": ("torch", None, None),
    "nn": ("torch", "nn", None),
    "F": ("torch.nn.functional", None, "F"),
    "math": ("math", None, None),
    "time": ("time", None, None),
    "os": ("os", None, None),
    "contextlib": ("contextlib", None, None),
    "functools": ("functools", None, None),
}


def with_missing_imports(text: str, path: str) -> tuple[str, list[str]]:
    """``text`` with imports for KNOWN_IMPORTS names it uses but never binds; what was added.

    Deliberately narrow: a name bound anywhere in the file (an argument, a loop variable,
    a local import) counts as defined, so nothing is added where it might shadow.
    """
    try:
        tree = astparse.parse(text)
    except SyntaxError:
        return text, []  # the verifier reports such a file
    used: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    added = []
    for name in sorted((used - bound) & KNOWN_IMPORTS.keys()):
        module, imported, alias = KNOWN_IMPORTS[name]
        try:
            text = insert_import(text, module, imported, path, alias).source
        except (EditRefused, cst.ParserSyntaxError):
            continue
        added.append(name)
    return text, added


Refusals = dict[tuple[str, str, str], str]  # (path, rule, the line's text) -> why


def refusals(source: Path, settings: Mapping[str, Any], scan_file: str | None = None) -> Refusals:
    """The constructs the codemods were meant to port but refused, each with the reason
    (``FusedLAMB``: torch.optim has no LAMB). Read from the rewrite's own result."""
    result = _codemod_result(
        source,
        settings["target"],
        list(settings.get("select") or ()),
        bool(settings.get("annotate", False)),
        settings.get("run_id"),
        scan_filters(settings),
        bool(settings.get("safe_only")),
        scan_file,
    )
    return {(f.path, f.rule, f.snippet.strip()): why for f, why in result.unapplied}


REFUSED_HINT = (
    "the catalogue's codemod refused this one: {why}. Port it only where the program "
    "computes exactly the same on the target (write what torch lacks in plain PyTorch); "
    "otherwise leave the lines unchanged."
)


def llm_constructs(
    source: Path,
    overlay: dict[str, str],
    work: Path,
    settings: Mapping[str, Any],
    refused: Refusals | None = None,
) -> list[PlanItem]:
    """The catalogue's ``llm`` constructs in the current migration, bottom-up per file, and
    the ``auto`` ones the codemods refused (``refused``), each with the reason as its hint:
    a model may port what a rule cannot say is the same, and the verifier checks it."""
    materialize(source, overlay, work)
    target = settings["target"]
    select = tuple(settings.get("select") or ())
    left_alone = scan_filters(settings)
    options = ScanOptions(
        target=target, select=select, skip=left_alone["skip"], exclude=left_alone["exclude"]
    )
    scanned = scan(work, options)
    items: list[PlanItem] = []
    for f in scanned.findings:
        kind, hint = f.fix[target]["kind"], f.fix[target]["hint"]
        why = (refused or {}).get((f.path, f.rule, f.snippet.strip()))
        if kind == "auto" and why is not None:
            kind, hint = "llm", REFUSED_HINT.format(why=why.rstrip("."))
        if kind == "llm" and f.path.endswith(".py"):
            items.append(
                {
                    "rule": f.rule,
                    "path": f.path,
                    "line": f.line,
                    "end_line": f.end_line,
                    "message": f.message,
                    "hint": hint,
                }
            )
    return sorted(items, key=lambda i: (i["path"], -i["line"]))


def prune_cuda_imports(
    source: Path, overlay: dict[str, str], work: Path, paths: list[str]
) -> dict[str, str]:
    """Drop imports of CUDA-only libraries that nothing uses any more in ``paths``.

    Once the LLM replaced every use of apex or flash-attn, the import is what
    still fails on the target; an unused import does nothing else.
    """
    materialize(source, overlay, work)
    updated = dict(overlay)
    for rel in paths:
        path = work / rel
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            pruned = remove_unused_imports(text, cuda_only_modules(), rel)
        except (EditRefused, cst.ParserSyntaxError):  # the verifier reports such a file
            continue
        if pruned != text:
            updated[rel] = pruned
    return updated


@cache
def cuda_only_modules() -> tuple[str, ...]:
    """The CUDA-only libraries the catalogue knows (rule TPP001's import patterns)."""
    rule = load_catalogue().get("TPP001")
    patterns = rule.match.get("import", []) if rule is not None else []
    return tuple(
        sorted({p.removesuffix(".*") for p in patterns if "*" not in p.removesuffix(".*")})
    )


def construct_request(item: PlanItem, target: str) -> RepairRequestRecord:
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


def edit_request(
    edit: AgentEdit, overlay: dict[str, str], verification: Mapping[str, Any], target: str
) -> RepairRequestRecord | None:
    """Revisit an earlier LLM edit after a parity failure, showing what it replaced.

    The edit is found again by its text (later edits and pruned imports moved its
    lines); an edit whose text is gone (rewritten since) is not revisited.
    """
    text, after = overlay.get(edit["path"]), edit.get("after") or ""
    span = edit_span(edit, text)
    if span is None:
        return None
    start, end = span
    run = verification.get("failure") or verification.get("target") or {}
    error = run.get("error") or {}
    return {
        "kind": "failure",
        "target": target,
        "path": edit["path"],
        "start_line": start,
        "end_line": end,
        "problem": f"{error.get('type', 'Error')}: {error.get('message', '')}"[:600],
        "context": (
            "These lines were rewritten earlier and the program's numbers no longer match "
            "the original's. Make them compute exactly what the original computed: the same "
            "values and hyperparameters, including defaults that differ between the old API "
            f"and the new one.\nOriginal:\n{edit.get('before', '').rstrip()}\n"
            f"Now:\n{after.rstrip()}"
        ),
    }


def edit_span(edit: AgentEdit, text: str | None) -> tuple[int, int] | None:
    """The lines an earlier edit's new text has in ``text`` (found by its text: later
    edits moved it), or None where that text is gone."""
    after = edit.get("after") or ""
    if text is None or not after.strip() or after not in text:
        return None
    start = text[: text.index(after)].count("\n") + 1
    return start, start + max(after.rstrip("\n").count("\n"), 0)


def failure_request(
    diagnosis: DiagnosisRecord, verification: Mapping[str, Any], target: str
) -> RepairRequestRecord | None:
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
