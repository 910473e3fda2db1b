"""Statistics over a scan, in the spirit of HIPIFY/SYCLomatic migration reports:
constructs per category and rule, and how much of it each target can fix
automatically."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..catalogue import TARGETS
from ..findings import ScanResult, work_counts


def summarize(result: ScanResult) -> dict[str, Any]:
    findings = result.findings
    targets = (result.target,) if result.target else TARGETS
    fix_kinds: dict[str, dict[str, int]] = {}
    for target in targets:
        # advisories apart from work for a human, as every count says them (work_kind)
        fix_kinds[target] = work_counts(
            (f.fix[target]["kind"], f.category) for f in findings if target in f.fix
        )
    auto_share = {
        t: round(c["auto"] / total, 4) if (total := sum(c.values())) else 1.0
        for t, c in fix_kinds.items()
    }
    return {
        "files_scanned": result.files_scanned,
        "loc": result.loc,
        "findings": len(findings),
        "files_with_findings": len({f.path for f in findings}),
        "by_severity": dict(Counter(f.severity for f in findings).most_common()),
        "by_category": dict(Counter(f.category for f in findings).most_common()),
        "by_rule": dict(sorted(Counter(f.rule for f in findings).items())),
        "fix_kinds": fix_kinds,
        "auto_share": auto_share,
        "cuda_only_dependencies": sum(d.cuda_only for d in result.dependencies),
        "skipped": len(result.skipped),
        "elapsed_s": round(result.elapsed_s, 3),
    }
