"""The batch's summary in four formats: Markdown for people, CSV for spreadsheets, JSON for tools,
and index.html, a page linking each repository's own report page (``tools.report.html``).

Rows are sorted by name and hold only what the migration decided (no run ids,
no dates, no absolute paths under DIR), so two batches of the same sources with
the same options write the same summary whatever order their jobs finished
in, whether or not one was killed and resumed, on whichever executor: only the
``time_s`` fields differ.

Reasons quote what a repository's program printed, and refs and sources come from
the list: the Markdown escapes them and the CSV neutralises formulas
(``tools.safetext``).
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torchport.tools.atomicfile import atomic_write
from torchport.tools.filenames import printable_data
from torchport.tools.report.html import batch_index
from torchport.tools.safetext import csv_cell, markdown_text, uri_path

from .charts import CHART, write_chart
from .job import share

FIELDS = (
    "name",
    "source",
    "ref",
    "commit",
    "verdict",
    "reason",
    "configuration",
    "constructs",
    "converted",
    "converted_share",
    "manual_items",
    "advisories",
    "llm_edits",
    "llm_tokens",
    "time_s",
    "report",
)
SETTINGS = ("target", "verify", "steps", "llm")


def summarize(
    records: Sequence[Mapping[str, Any]],
    settings: dict[str, Any],  # job.JobRecords, by field
) -> dict[str, Any]:
    """The summary as data: settings, totals and one row per repository."""
    rows = [{k: r.get(k) for k in FIELDS} for r in sorted(records, key=lambda r: r["name"])]
    constructs = sum(r["constructs"] or 0 for r in rows)
    converted = sum(r["converted"] or 0 for r in rows)
    totals = {
        "repositories": len(rows),
        "verdicts": dict(sorted(Counter(r["verdict"] for r in rows).items())),
        "constructs": constructs,
        "converted": converted,
        "converted_share": share(converted, constructs),
        "manual_items": sum(r["manual_items"] or 0 for r in rows),
        "advisories": sum(r["advisories"] or 0 for r in rows),
        "llm_edits": sum(r["llm_edits"] or 0 for r in rows),
        "llm_tokens": sum(r["llm_tokens"] or 0 for r in rows),
        "time_s": round(sum(r["time_s"] or 0.0 for r in rows), 1),
    }
    return {"settings": {k: settings.get(k) for k in SETTINGS}, "totals": totals, "repos": rows}


def write_summary(out_dir: Path, summary: dict[str, Any]) -> list[Path]:
    """Write DIR/summary.{md,csv,json,png} and DIR/index.html, each atomically; returns
    their paths.

    A source path that is not UTF-8 is written as ``tools.filenames.printable`` says."""
    summary = printable_data(summary)
    written = []
    for suffix, text in (
        ("md", to_markdown(summary)),
        ("csv", to_csv(summary)),
        ("json", json.dumps(summary, indent=2) + "\n"),
    ):
        path = out_dir / f"summary.{suffix}"
        atomic_write(path, text)
        written.append(path)
    atomic_write(out_dir / "index.html", batch_index(summary))
    chart = write_chart(out_dir, summary)  # verdict counts and time per repository
    return [*written, out_dir / "index.html", *([chart] if chart else [])]


def to_csv(summary: dict[str, Any]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in summary["repos"]:
        writer.writerow({k: "" if v is None else csv_cell(v) for k, v in row.items()})
    return buffer.getvalue()


def to_markdown(summary: dict[str, Any]) -> str:
    s, t = summary["settings"], summary["totals"]
    verdicts = ", ".join(f"{n} {v}" for v, n in t["verdicts"].items())
    llm = f"LLM: {s['llm']}, {t['llm_edits']} edits, {t['llm_tokens']} tokens"
    steps = f"{s['steps']} step{'s' if s['steps'] != 1 else ''}"
    verification = f"{steps} per run" if s["verify"] else "not run (--no-verify)"
    lines = [
        f"# torchport batch: {t['repositories']} repositories to `{s['target']}`",
        "",
        f"- verdicts: {verdicts}",
        f"- constructs: {t['constructs']} found, {t['converted']} converted automatically "
        f"({_percent(t['converted_share'])}), {t['manual_items']} left for a human, "
        f"{t['advisories']} performance advisories",
        f"- {llm}; time: {t['time_s']:.1f} s in all (sum over repositories)",
        f"- verification: {verification}",
        *(["", f"![verdicts, and time per repository]({CHART})"] if summary["repos"] else []),
        "",
        "| repository | verdict | constructs | converted | manual | advisories | tokens | time "
        "| details |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in summary["repos"]:
        name = f"{r['name']} @ {r['ref']}" if r["ref"] else r["name"]
        details = _cell(r["reason"] or "")
        if r.get("configuration"):  # the repository's torchport.toml, and who set what
            details += f"; {_cell(r['configuration'])}"
        if r["report"]:
            details += f" ([report]({uri_path(r['report'] + '/summary.md')}))"
        lines.append(
            f"| {_cell(name)} | {r['verdict']} | {r['constructs']} | {r['converted']} "
            f"({_percent(r['converted_share'])}) | {r['manual_items']} | {r['advisories']} "
            f"| {r['llm_tokens']} "
            f"| {r['time_s']:.1f} s | {details} |"
        )
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def _cell(text: str) -> str:
    return markdown_text(" ".join(text.split()))
