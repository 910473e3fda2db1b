"""A Markdown report for people: pull-request comments, wikis, the eval leaderboard.

What the repository chose (file names, dependency specs, entry commands, skip reasons) is
shown as code spans or escaped text, so rendering the report never produces its HTML,
links or images; the catalogue's own titles and messages stay Markdown.
"""

from __future__ import annotations

from ..catalogue import load_catalogue
from ..findings import ScanResult
from ..safetext import markdown_code, markdown_text
from .summary import summarize


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(result: ScanResult) -> str:
    s = summarize(result)
    catalogue = load_catalogue()
    target = result.target or "all targets"
    out = [
        f"# torchport scan ({target})",
        "",
        f"{s['files_scanned']} files, {s['loc']} lines scanned; "
        f"**{s['findings']} CUDA constructs** in {s['files_with_findings']} files; "
        f"{s['skipped']} files skipped.",
        "",
        "## Fixes per target",
        "",
        "| target | auto | llm | manual | advisory | automatic share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for t, k in s["fix_kinds"].items():
        out.append(
            f"| {t} | {k['auto']} | {k['llm']} | {k['manual']} | {k['advisory']} "
            f"| {s['auto_share'][t]:.0%} |"
        )
    out += ["", "## Constructs by category", "", "| category | findings |", "|---|---:|"]
    out += [f"| {c} | {n} |" for c, n in s["by_category"].items()]
    out += ["", "## Rules", "", "| rule | title | findings |", "|---|---|---:|"]
    out += [
        f"| {code} | {_cell(catalogue.by_code[code].title)} | {n} |"
        for code, n in sorted(s["by_rule"].items(), key=lambda kv: -kv[1])
    ]
    out += [
        "",
        "## Findings",
        "",
        "| location | rule | severity | message | fix |",
        "|---|---|---|---|---|",
    ]
    for f in result.findings:
        where = f"{f.path}:{f.line}" + (f" (cell {f.cell})" if f.cell else "")
        fix = "; ".join(f"{t}: {v['kind']}" for t, v in f.fix.items())
        cell = markdown_code(where, in_table=True)
        out.append(f"| {cell} | {f.rule} | {f.severity} | {_cell(f.message)} | {fix} |")
    if result.entrypoints:
        out += ["", "## Entry points", ""]
        out += [
            f"- {markdown_code(e.command)} ({markdown_text(', '.join(e.reasons))})"
            for e in result.entrypoints[:10]
        ]
    if result.dependencies:
        out += ["", "## Dependencies", ""]
        out += [
            f"- {markdown_code(d.name + d.spec)} ({markdown_code(f'{d.path}:{d.line}')})"
            + (" **CUDA-only**" if d.cuda_only else "")
            for d in result.dependencies
        ]
    if result.skipped:
        out += ["", "## Skipped", ""]
        out += [f"- {markdown_code(sk.path)}: {markdown_text(sk.reason)}" for sk in result.skipped]
    return "\n".join(out) + "\n"
