"""The terminal report: findings grouped by file, then a statistics summary.

File names, code snippets, dependency names, entry commands and skip reasons come from
the repository, so each is printed through ``terminal_line``: one field, one line, no
escape sequences.
"""

from __future__ import annotations

from itertools import groupby

from ..catalogue import load_catalogue
from ..findings import ScanResult
from ..safetext import terminal_line
from .summary import summarize


def _fix_label(fix: dict[str, dict[str, str]]) -> str:
    return " ".join(f"{t}:{v['kind']}" for t, v in fix.items())


def render_text(result: ScanResult) -> str:
    out: list[str] = []
    for path, group in groupby(result.findings, key=lambda f: f.path):
        out.append(terminal_line(path))
        for f in group:
            where = f"cell {f.cell} " if f.cell else ""
            fixes = _fix_label(f.fix)
            out.append(
                f"  {where}{f.line}:{f.col}  {f.rule}  {f.severity:<7}  {f.message}  [{fixes}]"
            )
            if f.snippet:
                out.append(f"      | {terminal_line(f.snippet)}")
        out.append("")
    out.extend(render_summary(result))
    return "\n".join(out) + "\n"


def render_summary(result: ScanResult) -> list[str]:
    s = summarize(result)
    catalogue = load_catalogue()
    lines = [
        "Summary",
        f"  files scanned: {s['files_scanned']} ({s['loc']} lines); "
        f"with CUDA constructs: {s['files_with_findings']}; skipped: {s['skipped']}",
        f"  findings: {s['findings']} "
        + "("
        + ", ".join(f"{k} {v}" for k, v in s["by_severity"].items())
        + ")",
    ]
    if s["by_category"]:
        lines.append("  constructs by category:")
        lines += [f"    {cat:<15} {n:>5}" for cat, n in s["by_category"].items()]
        lines.append("  most frequent rules:")
        top = sorted(s["by_rule"].items(), key=lambda kv: -kv[1])[:10]
        lines += [f"    {code}  {n:>5}  {catalogue.by_code[code].title}" for code, n in top]
    lines.append("  fixes per target (auto / llm / manual, share automatic):")
    for target, kinds in s["fix_kinds"].items():
        lines.append(
            f"    {target:<12} {kinds['auto']:>4} / {kinds['llm']:>4} / {kinds['manual']:>4}"
            f"   {s['auto_share'][target]:.0%}"
        )
    cuda_deps = [d for d in result.dependencies if d.cuda_only]
    if cuda_deps:
        names = sorted({terminal_line(d.name) for d in cuda_deps})
        lines.append("  CUDA-only dependencies: " + ", ".join(names))
    if result.entrypoints:
        lines.append("  entry points (most likely first):")
        lines += [
            f"    {terminal_line(e.command)}   ({terminal_line(', '.join(e.reasons))})"
            for e in result.entrypoints[:5]
        ]
    if result.skipped:
        lines.append("  skipped:")
        lines += [
            f"    {terminal_line(sk.path)}: {terminal_line(sk.reason)}"
            for sk in result.skipped[:20]
        ]
        if len(result.skipped) > 20:
            lines.append(f"    ... and {len(result.skipped) - 20} more (see --format json)")
    lines.append(f"  time: {s['elapsed_s']:.2f}s")
    return lines
