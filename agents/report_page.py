"""``torchport-report/index.html`` of a migration: the run's report as one page.

Filled from what the other reports are written from: the JSON report's data
(``migration_to_dict``: the edits with their rules, what is left for a human at the port's
lines), verification.md's parts (``deliver.verification_sections``, passed in) and the
plots; ``tools.report.html`` lays it out and escapes it. The order is a reader's: the
verdict and its reason, the run and its sandbox and settings (each with where it came
from), the changes side by side, the plots, the environment, the timing, the rest.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from torchport.tools.filenames import printable
from torchport.tools.output.nofollow import read_bytes
from torchport.tools.report.html import Note, ReportPage, Section, render_page
from torchport.tools.report.hunks import split
from torchport.tools.report.migration import migration_to_dict
from torchport.tools.safetext import markdown_code, markdown_text

from . import config_record
from .project_config import KEYS
from .report_record import ReportRecord

NOT_VERIFIED = "verification was not run (--no-verify)"
MAX_SHOWN_BYTES = 2 << 20  # a file shown only for a note: larger is listed, not shown
# The run's budget: flags of the command line (or their defaults), never the repository's.
BUDGET = ("timeout_s", "memory_mb", "isolation", "devices", "llm", "max_iterations")
# Sections after the changes: verification.md's part, the page's anchor and title.
LATER = (
    ("losses", "plots", "Losses"),
    ("divergence", "divergence", "First divergence"),
    ("precision", "precision", "Matmul precision"),
    ("kernels", "kernels", "Kernel call sites"),
    ("fallbacks", "fallbacks", "Kernels through a fallback"),
    ("evidence", "evidence", "Runtime evidence"),
    ("agent_edits", "llm-edits", "Edits beyond the codemods"),
    ("decisions", "decisions", "Decisions"),
)


def html_report(
    settings: Mapping[str, Any],
    result: Any,
    record: ReportRecord,
    parts: dict[str, list[str]],
    images: dict[str, bytes],
) -> str:
    """The page of a delivered migration (``result``: the final ``MigrationResult``)."""
    data = migration_to_dict(result)
    before = {printable(c.path): c.before for c in result.changes}
    after = {printable(c.path): c.after for c in result.changes}
    notes = notes_of(data, set(after))
    shown = _unchanged_files(Path(settings["source"]), notes, set(after))
    edits = [*data["edits"], *({**e, "by": "llm"} for e in record.get("agent_edits") or [])]
    v = record.get("verification") or {}
    page = ReportPage(
        title=Path(str(settings["source"])).name,
        target=str(record["target"]),
        verdict=str(record["verdict"]),
        reason=str(v.get("reason") or NOT_VERIFIED),
        lead=_lead(settings, record, parts["summary"]),
        before={**shown, **before},
        after=after,
        hunks=split(before, after, edits),
        notes=notes,
        changes_intro=_counts(data["summary"]),
        sections=_later(record, data, parts),
        images=images,
    )
    return render_page(page)


def notes_of(data: dict[str, Any], changed: set[str]) -> list[Note]:
    """What is left for a human and the performance advisories, at the port's lines."""
    notes = []
    for key, kind in (("left_for_humans", "left for you"), ("advisories", "performance advisory")):
        for item in data.get(key) or []:
            fix: dict[str, Any] = next(iter((item.get("fix") or {}).values()), {})
            said = [item.get("message", ""), f"— what to do: {fix.get('hint') or 'see the rule'}"]
            if item.get("reason") and item["reason"] != fix.get("hint"):
                said.append(f"({item['reason']})")
            line = item.get("migrated_line") if item["path"] in changed else item["line"]
            notes.append(
                Note(item["path"], int(line or item["line"]), item["rule"], kind, " ".join(said))
            )
    return notes


def _unchanged_files(source: Path, notes: list[Note], changed: set[str]) -> dict[str, str]:
    """The text of each file a note is in that the port did not change, read as the
    scanner read it (never through a symlink); one that cannot be read is only listed."""
    texts = {}
    for path in sorted({n.path for n in notes} - changed):
        try:
            data, _ = read_bytes(source, path)
        except (OSError, ValueError):
            continue
        if len(data) <= MAX_SHOWN_BYTES:
            texts[path] = data.decode("utf-8", "surrogateescape")
    return texts


def _lead(settings: Mapping[str, Any], record: ReportRecord, summary: list[str]) -> list[Section]:
    # the reason is the page's first line already; the sandbox has a section of its own
    facts = [line for line in summary[2:] if not line.startswith(("- sandbox (", "- why: "))]
    sandbox = [line for line in summary if line.startswith("- sandbox (")]
    if not sandbox:
        sandbox = ["- sandbox: no program was run (nothing to isolate)"]
    return [
        Section("run", "The run", "\n".join(facts)),
        Section("sandbox", "Sandbox and settings", "\n".join(sandbox + settings_table(settings))),
    ]


def settings_table(settings: Mapping[str, Any]) -> list[str]:
    """Every setting of the run with its value and where it came from: the repository's
    file, a ``TORCHPORT_*`` variable, a flag, or torchport's default."""
    kept = settings.get(config_record.KEY) or {}
    file = kept.get("file")
    head = (
        f"configuration file: {markdown_code(file)}"
        if file
        else ("no torchport.toml or [tool.torchport] in pyproject.toml")
    )
    rows = ["", head, "", "| setting | value | from |", "|---|---|---|"]
    for name in KEYS:
        key = name.replace("-", "_")
        if key not in settings and name not in (kept.get("set") or {}):
            continue
        value = settings.get(key, (kept.get("set") or {}).get(name, {}).get("value"))
        source = config_record.source_of(settings, name)
        rows.append(f"| {name} | {_cell(config_record.shown(name, value))} | {_cell(source)} |")
    for key in BUDGET:
        if key in settings:
            rows.append(
                f"| {key} | {_cell(str(settings[key]))} | the command line or its default |"
            )
    return rows


def _later(
    record: ReportRecord, data: dict[str, Any], parts: dict[str, list[str]]
) -> list[Section]:
    sections = [
        Section(anchor, title, "\n".join(_body(parts[key])))
        for key, anchor, title in LATER
        if parts.get(key)
    ]
    environment = [*_body(parts.get("environment") or []), f"- {_versions()}"]
    timing = [*parts.get("timing", []), *_run_time(record, data["summary"])]
    at = int(bool(parts.get("losses")))  # after the plots
    sections[at:at] = [
        Section("environment", "Environment and dependencies", "\n".join(environment)),
        Section("timing", "Timing", "\n".join(timing)),
    ]
    return sections


def _body(lines: list[str]) -> list[str]:
    """A part without its own heading (the page's section has the title)."""
    if len(lines) > 1 and not lines[0] and lines[1].startswith("## "):
        return lines[2:]
    return lines


def _run_time(record: ReportRecord, summary: dict[str, Any]) -> list[str]:
    return [
        f"- the whole run: {record.get('elapsed_s', 0)} s, {record.get('iterations', 0)} "
        f"verification round(s); the codemods: {summary.get('elapsed_s', 0)} s",
    ]


def _versions() -> str:
    """torchport's own environment, which ran the codemods and the comparison."""

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "absent"

    return (
        f"torchport {version('torchport')}, Python {platform.python_version()}, "
        f"torch {version('torch')}, on {markdown_text(platform.platform())}"
    )


def _counts(s: dict[str, Any]) -> str:
    return (
        f"{s['constructs_found']} CUDA constructs found: **{s['converted']} converted** "
        f"automatically ({s['edits']} edits), {s['left_for_humans']} left for a human, "
        f"{s['advisories']} performance advisories; files changed: {s['files_changed']} "
        "(the patch: `changes.patch`; every edit: `changes.json`)."
    )


def _cell(text: str) -> str:
    return markdown_code(text, in_table=True)
