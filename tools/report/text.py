"""The terminal report for people: the statistics first, then one line per construct,
grouped by severity (error, warning, info) and then by file.

Each line shows where the construct is, its rule, how it is fixed, the code and the
rule's title. With a target (``scan --target T``) the fix is T's alone, since that is the
decision in front of the reader; without one, or with ``--all-targets``, every target's
fix in one compact field (``all:auto``, or ``tpu,neuron:auto xla:manual``), which is
what someone choosing where to port needs side by side. The long per-target listing
(hints included) stays in the JSON, SARIF and Markdown reports.

File names, code snippets, dependency names, entry commands and skip reasons come from
the repository, so each is printed through ``terminal_line``: one field, one line, no
escape sequences.
"""

from __future__ import annotations

from ..catalogue import TARGETS, Severity, load_catalogue
from ..findings import Finding, ScanResult
from ..safetext import terminal_line
from .summary import summarize

SEVERITIES = tuple(s.value for s in Severity)  # most severe first: error, warning, info


def fix_label(fix: dict[str, dict[str, str]], target: str | None) -> str:
    """``target``'s fix kind; or every target's, targets with the same kind merged."""
    if target is not None and target in fix:
        return fix[target]["kind"]
    by_kind: dict[str, list[str]] = {}
    for t in [t for t in TARGETS if t in fix] + [t for t in fix if t not in TARGETS]:
        by_kind.setdefault(fix[t]["kind"], []).append(t)
    if len(by_kind) == 1 and len(fix) == len(TARGETS):
        return f"all:{next(iter(by_kind))}"
    return " ".join(f"{','.join(ts)}:{kind}" for kind, ts in by_kind.items())


def _severity_rank(f: Finding) -> int:
    return SEVERITIES.index(f.severity) if f.severity in SEVERITIES else len(SEVERITIES)


def _by_rank(severities: dict[str, int]) -> list[str]:
    return sorted(severities, key=lambda k: SEVERITIES.index(k) if k in SEVERITIES else 99)


def _order(f: Finding) -> tuple[int, str, int, int, int]:
    return (_severity_rank(f), f.path, f.cell or 0, f.line, f.col)


def _row(f: Finding, target: str | None, titles: dict[str, str]) -> list[str]:
    """Where, rule, fix, then the code and the rule's title."""
    what = " — ".join(x for x in (terminal_line(f.snippet), titles.get(f.rule, "")) if x)
    where = f"{f'cell {f.cell} ' if f.cell else ''}{f.line}:{f.col}"
    return [where, f.rule, fix_label(f.fix, target), what]


def render_findings(result: ScanResult, all_targets: bool = False) -> list[str]:
    """The findings, by severity then file, one line each (see the module's doc)."""
    target = None if all_targets else result.target
    titles = {r.code: r.title for r in load_catalogue()}
    ordered = sorted(result.findings, key=_order)
    rows = [_row(f, target, titles) for f in ordered]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    scope = f"what {result.target} needs fixed, with " if result.target else ""
    fixes = f"{target}'s fix" if target else "every target's fix (all:KIND where they agree)"
    out = [f"Findings by severity, then file: {scope}{fixes}"]
    severity = path = None
    for f, row in zip(ordered, rows, strict=True):
        if f.severity != severity:
            severity, path = f.severity, None
            count = sum(1 for g in ordered if g.severity == severity)
            out += ["", f"{severity} ({count})"]
        if f.path != path:
            path = f.path
            out.append(f"  {terminal_line(path)}")
        out.append(
            "    "
            + "  ".join(c.ljust(w) for c, w in zip(row[:3], widths, strict=True))
            + f"  {row[3]}"
        )
    out += ["", "A rule's documentation: torchport rules CODE; each fix's hint: --format json"]
    return out


def render_text(result: ScanResult, all_targets: bool = False) -> str:
    out = render_summary(result)
    if result.findings:
        out += ["", *render_findings(result, all_targets)]
    return "\n".join(out) + "\n"


def render_summary(result: ScanResult) -> list[str]:
    s = summarize(result)
    catalogue = load_catalogue()
    lines = [
        "Summary",
        f"  files scanned: {s['files_scanned']} ({s['loc']} lines); "
        f"with CUDA constructs: {s['files_with_findings']}; skipped: {s['skipped']}",
        f"  findings: {s['findings']}{_severities(s['by_severity'])}",
    ]
    if s["by_category"]:
        lines.append("  constructs by category:")
        lines += [f"    {cat:<15} {n:>5}" for cat, n in s["by_category"].items()]
        lines.append("  most frequent rules:")
        top = sorted(s["by_rule"].items(), key=lambda kv: -kv[1])[:10]
        lines += [f"    {code}  {n:>5}  {catalogue.by_code[code].title}" for code, n in top]
    lines.append("  fixes per target (auto / llm / manual / advisory, share automatic):")
    for target, kinds in s["fix_kinds"].items():
        lines.append(
            f"    {target:<12} {kinds['auto']:>4} / {kinds['llm']:>4} / {kinds['manual']:>4} / "
            f"{kinds['advisory']:>4}"
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


def _severities(counts: dict[str, int]) -> str:
    """`` (error 2, warning 1)``, most severe first; nothing when there are no findings."""
    if not counts:
        return ""
    return " (" + ", ".join(f"{k} {counts[k]}" for k in _by_rank(counts)) + ")"
