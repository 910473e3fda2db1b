"""``torchport-report/``: what a migration changed, why, and what is left for a human.

changes.patch  a unified diff that ``git apply`` accepts on the original tree
changes.json   every edit (rule, file, lines, before, after, reason) and every leftover
changes.csv    the same edits, one row each, for spreadsheets
manual.md      what a human must still do (rule, where, why, suggested approach), then
               the user options the port dropped, then the performance advisories
summary.md     constructs found = converted + left + advisory, per file and overall

The Markdown and CSV files show file names and code from the repository through
``tools.safetext`` (code spans, escaped text, formula-proof cells); changes.json and
changes.patch keep them exact.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ..catalogue import applicability, load_catalogue
from ..codemods.guard import REFUSED
from ..filenames import printable, printable_data
from ..fix_safety import SAFE_ONLY
from ..safetext import csv_cell, markdown_code, markdown_text
from .counts import Counts, Entry, count_constructs
from .dropped import dropped_options
from .patch import file_patch

if TYPE_CHECKING:
    from ..findings import Finding
    from ..migration_result import MigrationResult


def unified_diff(result: MigrationResult) -> str:
    """Every changed file's patch, in path order: ``git apply`` on the original applies it."""
    return "".join(
        file_patch(c.path, c.before, c.after, new=_added(result, c.path))
        for c in sorted(result.changes, key=lambda c: c.path)
    )


def _added(result: MigrationResult, rel: str) -> bool:
    """A file the port adds: the original tree has no file there (tools.migrate.shipped_files)."""
    return not os.path.lexists(result.root / rel)


def migration_to_dict(result: MigrationResult, counts: Counts | None = None) -> dict[str, Any]:
    """The JSON report; file names that are not UTF-8 are written as ``tools.filenames``
    says (each undecodable byte as ``\\xNN``), so the JSON is valid for any reader."""
    counts = counts or count_constructs(result)
    data = {
        "root": str(result.root),
        "target": result.target,
        "output": str(result.output) if result.output else None,
        "branch": result.branch,
        "backup": str(result.backup) if result.backup else None,
        "files_changed": sorted(c.path for c in result.changes),
        "edits": [
            {**asdict(e), "applicability": applicability.of(e.rule, result.target).applicability}
            for e in result.edits
        ],
        "left_for_humans": _json_items(counts, counts.left),
        "advisories": _json_items(counts, counts.advisory),
        "dropped_options": [d.to_json() for d in dropped_options(result.edits, result.target)],
        "skipped": [asdict(s) for s in result.scan.skipped],
        "summary": migration_summary(result, counts),
    }
    return printable_data(data)


def _json_items(counts: Counts, items: list[tuple[Finding, str]]) -> list[dict[str, Any]]:
    return [
        {**f.to_json(), "migrated_line": counts.migrated_line(f), "reason": why} for f, why in items
    ]


def migration_summary(result: MigrationResult, counts: Counts | None = None) -> dict[str, Any]:
    """The numbers: constructs found = converted + left for a human + advisories."""
    counts = counts or count_constructs(result)
    total = counts.totals()
    return {
        "constructs_found": total["found"],
        "converted": total["converted"],
        "left_for_humans": total["left"],
        "advisories": total["advisory"],
        "edits": len(result.edits),
        "dropped_options": len(dropped_options(result.edits, result.target)),
        "refused_by_guard": sum(why.startswith(REFUSED) for _, why in result.left_for_humans),
        "can_change_results": {
            kind.value: len(edits) for kind, edits in results_changing_edits(result).items()
        },
        "withheld_by_safe_only": sum(why.startswith(SAFE_ONLY) for _, why in result.unapplied),
        "converted_share": round(total["converted"] / total["found"], 4) if total["found"] else 1.0,
        "files_changed": len(result.changes),
        "per_file": counts.per_file(),
        "elapsed_s": round(result.elapsed_s, 3),
    }


# What the migration applied that can change what the program computes, by kind, in the
# order a reviewer reads them: other numbers first, then other behaviour.
RESULTS_CHANGING = (applicability.Applicability.NUMERICS, applicability.Applicability.BEHAVIOUR)


def results_changing_edits(result: MigrationResult) -> dict[applicability.Applicability, list]:
    """The applied edits whose fix is declared to change numerics or behaviour, by kind."""
    found: dict[applicability.Applicability, list] = {kind: [] for kind in RESULTS_CHANGING}
    for e in result.edits:
        kind = applicability.of(e.rule, result.target).applicability
        if kind in found:
            found[kind].append(e)
    return found


def _results_changing_md(result: MigrationResult) -> list[str]:
    """summary.md's section on the fixes a reviewer must read: what each may change."""
    found = results_changing_edits(result)
    if not any(found.values()):
        return []
    out = ["", "## Changes that can alter results", ""]
    out.append(
        "Applied fixes that are not pure renames (`--safe-only` applies none of them): "
        "review each before trusting the port's numbers."
    )
    titles = {
        applicability.Applicability.NUMERICS: "Numerics: the same steps, other numbers",
        applicability.Applicability.BEHAVIOUR: "Behaviour: the program does something else",
    }
    for kind, edits in found.items():
        if not edits:
            continue
        out += ["", f"### {titles[kind]}", ""]
        for e in edits:
            why = applicability.of(e.rule, result.target).why
            where = f"{e.path}:{e.line}" + (f" (cell {e.cell})" if e.cell is not None else "")
            out.append(f"- {e.rule} at {markdown_code(where)}: {markdown_text(why)}")
    return out


def one_line_summary(result: MigrationResult) -> str:
    """The migration's numbers in one sentence, as the CLI prints them."""
    s = migration_summary(result)
    dropped = s["dropped_options"]
    return (
        f"{s['constructs_found']} constructs: {s['converted']} converted automatically "
        f"({s['edits']} codemod edits in {s['files_changed']} files), "
        f"{s['left_for_humans']} left for a human, {s['advisories']} performance advisories"
        + (f"; {dropped} user options dropped (manual.md)" if dropped else "")
    )


def _csv(result: MigrationResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rule", "file", "cell", "start_line", "end_line", "before", "after", "reason"])
    for e in result.edits:
        row = [e.rule, e.path, e.cell or "", e.line, e.end_line, e.before, e.after, e.reason]
        writer.writerow([csv_cell(value) for value in row])
    return out.getvalue()


def _where(entry: Entry, changed: set[str]) -> str:
    """``train.py:42 (original 40)``: the migrated file's line, the original's beside it
    where the migration moved it."""
    f = entry.finding
    where = f"{f.path}:{entry.migrated_line}" + (f" (cell {f.cell})" if f.cell else "")
    moved = f.path in changed and entry.migrated_line != f.line
    return where + (f" (original {f.line})" if moved else "")


def _entry_lines(result: MigrationResult, entry: Entry, changed: set[str]) -> list[str]:
    f = entry.finding
    rule = load_catalogue().by_code[f.rule]
    fix = f.fix[result.target]
    times = f" x{entry.times}" if entry.times > 1 else ""
    why = entry.reason
    return [
        f"## {markdown_code(_where(entry, changed))} — {f.rule} {rule.title}{times}",
        "",
        f"- code: {markdown_code(f.snippet)}",
        f"- why: {f.message}",
        f"- fix kind: {fix['kind']}"
        + (f" ({markdown_text(why)})" if why and why != fix["hint"] else ""),
        f"- suggested approach: {fix['hint'] or 'see the rule doc'} (`torchport rules {f.rule}`)",
        "",
    ]


def _manual(result: MigrationResult, counts: Counts) -> str:
    changed = {c.path for c in result.changes}
    left, advisory = counts.entries("left"), counts.entries("advisory")
    lines = [f"# Left for a human ({result.target})", ""]
    if not left:
        lines += ["Nothing: every construct that blocks the port was converted automatically.", ""]
    else:
        lines += [
            f"{len(counts.left)} constructs need a decision the codemods cannot make "
            f"({len(left)} entries); lines are the migrated file's.",
            "",
        ]
    for entry in left:
        lines += _entry_lines(result, entry, changed)
    dropped = dropped_options(result.edits, result.target)
    if dropped:
        lines += [
            "# User options the port dropped",
            "",
            f"{len(dropped)} options the original was given have no effect in the port on "
            f"{result.target}: the port runs, without them.",
            "",
        ]
        lines += [
            f"- {markdown_code(f'{d.path}:{d.line}')} ({d.rule}): {markdown_text(d.text())}"
            for d in dropped
        ]
        lines += [""]
    if advisory:
        lines += [
            "# Performance advisories",
            "",
            f"{len(counts.advisory)} constructs run correctly but slowly on {result.target} "
            f"({len(advisory)} entries): worth a look once the port works.",
            "",
        ]
        for entry in advisory:
            lines += _entry_lines(result, entry, changed)
    return "\n".join(lines)


def _summary_md(result: MigrationResult, counts: Counts) -> str:
    s = migration_summary(result, counts)
    out = [
        f"# torchport migration to {result.target}",
        "",
        f"{s['constructs_found']} CUDA constructs found: **{s['converted']} converted** "
        f"automatically ({s['converted_share']:.0%}, {s['edits']} edits), "
        f"{s['left_for_humans']} left for a human and {s['advisories']} performance "
        f"advisories (see manual.md); {s['files_changed']} files changed.",
        *(
            [
                f"{s['refused_by_guard']} of those fixes were refused by the semantic guard: "
                "applied, they would add a finding pyflakes reports (manual.md names it)."
            ]
            if s["refused_by_guard"]
            else []
        ),
        *(
            [
                f"{s['dropped_options']} user options the original was given were dropped "
                "(manual.md lists them)."
            ]
            if s["dropped_options"]
            else []
        ),
        *(
            [
                f"{s['withheld_by_safe_only']} fixes that can change results were not applied "
                "(--safe-only; manual.md lists them)."
            ]
            if s["withheld_by_safe_only"]
            else []
        ),
        "",
        "| file | found | converted | left | advisory |",
        "|---|---:|---:|---:|---:|",
    ]
    out += [
        f"| {markdown_code(p, in_table=True)} | {v['found']} | {v['converted']} | {v['left']} "
        f"| {v['advisory']} |"
        for p, v in s["per_file"].items()
    ]
    out += _results_changing_md(result)
    if result.scan.skipped:
        out += ["", "## Not migrated (copied unchanged)", ""]
        out += [
            f"- {markdown_code(sk.path)}: {markdown_text(sk.reason)}" for sk in result.scan.skipped
        ]
    return "\n".join(out) + "\n"


def migration_report_files(result: MigrationResult) -> dict[str, str]:
    """The report's files by name, for the writer to put in place with the output.

    The patch holds the files' own bytes (surrogate escapes, written back as the bytes
    they stand for); the rest show an undecodable byte of a file name as ``\\xNN``.
    """
    counts = count_constructs(result)
    return {
        "changes.patch": unified_diff(result),
        "changes.json": printable(json.dumps(migration_to_dict(result, counts), indent=2) + "\n"),
        "changes.csv": printable(_csv(result)),
        "manual.md": printable(_manual(result, counts)),
        "summary.md": printable(_summary_md(result, counts)),
    }
