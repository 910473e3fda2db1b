"""``--safe-only``: the automatic fixes a migration applies when it may change nothing but
names, and the reason it gives for the others (tools/catalogue/applicability.toml)."""

from __future__ import annotations

from .catalogue import applicability
from .findings import Finding

SAFE_ONLY = "not applied (--safe-only): its fix changes"  # the reason's start, for reports


def withheld_unless_safe(
    auto: list[Finding], target: str
) -> tuple[list[Finding], list[tuple[Finding, str]]]:
    """The automatic fixes ``--safe-only`` applies, and those it leaves for a human, each
    with what its fix would change."""
    kept, withheld = [], []
    for finding in auto:
        declared = applicability.of(finding.rule, target)
        if declared.applicability is applicability.Applicability.SAFE:
            kept.append(finding)
        else:
            withheld.append((finding, f"{SAFE_ONLY} {declared.applicability}: {declared.why}"))
    return kept, withheld
