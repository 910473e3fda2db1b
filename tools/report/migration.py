"""``torchport-report/``: what a migration changed, why, and what is left for a human.

changes.patch  a unified diff that ``git apply`` accepts on the original tree
changes.json   every edit (rule, file, lines, before, after, reason) and every leftover
changes.csv    the same edits, one row each, for spreadsheets
manual.md      what a human must still do: rule, where, why, suggested approach
summary.md     constructs found and converted, per file and overall

The Markdown and CSV files show file names and code from the repository through
``tools.safetext`` (code spans, escaped text, formula-proof cells); changes.json and
changes.patch keep them exact.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalogue import load_catalogue
from ..codemods.guard import REFUSED
from ..filenames import printable, printable_data
from ..safetext import csv_cell, markdown_code, markdown_text
from .patch import file_patch

if TYPE_CHECKING:
    from ..migrate import MigrationResult


def unified_diff(result: MigrationResult) -> str:
    """Every changed file's patch, in path order: ``git apply`` on the original applies it."""
    return "".join(
        file_patch(c.path, c.before, c.after) for c in sorted(result.changes, key=lambda c: c.path)
    )


def migration_to_dict(result: MigrationResult) -> dict[str, Any]:
    """The JSON report; file names that are not UTF-8 are written as ``tools.filenames``
    says (each undecodable byte as ``\\xNN``), so the JSON is valid for any reader."""
    data = {
        "root": str(result.root),
        "target": result.target,
        "output": str(result.output) if result.output else None,
        "branch": result.branch,
        "backup": str(result.backup) if result.backup else None,
        "files_changed": sorted(c.path for c in result.changes),
        "edits": [asdict(e) for e in result.edits],
        "left_for_humans": [{**f.to_json(), "reason": why} for f, why in result.left_for_humans],
        "skipped": [asdict(s) for s in result.scan.skipped],
        "summary": migration_summary(result),
    }
    return printable_data(data)


def migration_summary(result: MigrationResult) -> dict[str, Any]:
    found = Counter(f.path for f in result.scan.findings)
    converted = Counter(e.path for e in result.edits)
    left = Counter(f.path for f, _ in result.left_for_humans)
    total = sum(found.values())
    return {
        "constructs_found": total,
        "converted": len(result.edits),
        "left_for_humans": sum(left.values()),
        "refused_by_guard": sum(why.startswith(REFUSED) for _, why in result.left_for_humans),
        "converted_share": round(len(result.edits) / total, 4) if total else 1.0,
        "files_changed": len(result.changes),
        "per_file": {
            path: {"found": found[path], "converted": converted[path], "left": left[path]}
            for path in sorted(found)
        },
        "elapsed_s": round(result.elapsed_s, 3),
    }


def _csv(result: MigrationResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rule", "file", "cell", "start_line", "end_line", "before", "after", "reason"])
    for e in result.edits:
        row = [e.rule, e.path, e.cell or "", e.line, e.end_line, e.before, e.after, e.reason]
        writer.writerow([csv_cell(value) for value in row])
    return out.getvalue()


def _manual(result: MigrationResult) -> str:
    catalogue = load_catalogue()
    items = sorted(result.left_for_humans, key=lambda fw: fw[0].sort_key())
    lines = [f"# Left for a human ({result.target})", ""]
    if not items:
        return "\n".join([*lines, "Nothing: every construct was converted automatically.", ""])
    lines += [f"{len(items)} constructs need a decision the codemods cannot make.", ""]
    for f, why in items:
        rule = catalogue.by_code[f.rule]
        where = f"{f.path}:{f.line}" + (f" (cell {f.cell})" if f.cell else "")
        fix = f.fix[result.target]
        lines += [
            f"## {markdown_code(where)} — {f.rule} {rule.title}",
            "",
            f"- code: {markdown_code(f.snippet)}",
            f"- why: {f.message}",
            f"- fix kind: {fix['kind']}"
            + (f" ({markdown_text(why)})" if why and why != fix["hint"] else ""),
            f"- suggested approach: {fix['hint'] or 'see the rule doc'} "
            f"(`torchport rules {f.rule}`)",
            "",
        ]
    return "\n".join(lines)


def _summary_md(result: MigrationResult) -> str:
    s = migration_summary(result)
    out = [
        f"# torchport migration to {result.target}",
        "",
        f"{s['constructs_found']} CUDA constructs found; **{s['converted']} converted** "
        f"automatically ({s['converted_share']:.0%}); {s['left_for_humans']} left for a human "
        f"(see manual.md); {s['files_changed']} files changed.",
        *(
            [
                f"{s['refused_by_guard']} of those fixes were refused by the semantic guard: "
                "applied, they would add a finding pyflakes reports (manual.md names it)."
            ]
            if s["refused_by_guard"]
            else []
        ),
        "",
        "| file | found | converted | left |",
        "|---|---:|---:|---:|",
    ]
    out += [
        f"| {markdown_code(p, in_table=True)} | {v['found']} | {v['converted']} | {v['left']} |"
        for p, v in s["per_file"].items()
    ]
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
    return {
        "changes.patch": unified_diff(result),
        "changes.json": printable(json.dumps(migration_to_dict(result), indent=2) + "\n"),
        "changes.csv": printable(_csv(result)),
        "manual.md": printable(_manual(result)),
        "summary.md": printable(_summary_md(result)),
    }


def write_migration_report(result: MigrationResult, directory: Path) -> None:
    """Write the report's files into ``directory`` (never through a symlink below it)."""
    from ..output.nofollow import write_text

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in migration_report_files(result).items():
        write_text(directory, name, text)
