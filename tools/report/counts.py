"""One definition of a construct, so that every report's numbers add up.

A construct is a finding of the scan. Each lands in exactly one bucket: converted
(an automatic fix that applied, however many edits it took), left for a human, or a
performance advisory (a ``performance`` rule that was not fixed, or a fix that applied
but leaves its construct slow, ``Edit.advisory``: it does not block a port, it makes it
slow). Follow-up edits are edits, not constructs. So, per file and in total, found =
converted + left + advisory by construction, and every front door (the report files, the
CLI's line, the batch and benchmark rows) reads these numbers.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchport.sandbox import astparse

from ..findings import ADVISORY_CATEGORY as ADVISORY_CATEGORY  # where it was defined
from ..findings import Finding, is_advisory
from .linemap import line_map

if TYPE_CHECKING:
    from ..migration_result import MigrationResult

BUCKETS = ("converted", "left", "advisory")


@dataclass(frozen=True)
class Entry:
    """One line of manual.md: the findings of one rule on one line, with one reason."""

    findings: tuple[Finding, ...]
    reason: str
    migrated_line: int

    @property
    def finding(self) -> Finding:
        return self.findings[0]

    @property
    def times(self) -> int:
        return len(self.findings)


@dataclass
class Counts:
    """Findings by bucket, and the numbers per file and in total."""

    converted: list[Finding] = field(default_factory=list)
    left: list[tuple[Finding, str]] = field(default_factory=list)
    advisory: list[tuple[Finding, str]] = field(default_factory=list)
    migrated_line: Callable[[Finding], int] = lambda f: f.line

    @property
    def found(self) -> int:
        return len(self.converted) + len(self.left) + len(self.advisory)

    def totals(self) -> dict[str, int]:
        return {
            "found": self.found,
            "converted": len(self.converted),
            "left": len(self.left),
            "advisory": len(self.advisory),
        }

    def per_file(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        rows = (
            [("converted", f) for f in self.converted]
            + [("left", f) for f, _ in self.left]
            + [("advisory", f) for f, _ in self.advisory]
        )
        for bucket, f in rows:
            row = table.setdefault(f.path, {"found": 0, **dict.fromkeys(BUCKETS, 0)})
            row["found"] += 1
            row[bucket] += 1
        return dict(sorted(table.items()))

    def entries(self, bucket: str) -> list[Entry]:
        """``left`` or ``advisory`` as manual.md lists them: one entry per rule, line and
        reason (two ``.item()`` calls on one line are one entry, x2), in file order."""
        grouped: dict[tuple, list[Finding]] = {}
        for f, why in sorted(getattr(self, bucket), key=lambda fw: fw[0].sort_key()):
            grouped.setdefault((f.path, f.cell, f.line, f.rule, why), []).append(f)
        return [Entry(tuple(fs), key[4], self.migrated_line(fs[0])) for key, fs in grouped.items()]


def count_constructs(result: MigrationResult) -> Counts:
    """Put every finding of ``result``'s scan in its bucket (a finding counts once)."""
    target = result.target
    unapplied = {id(f): why for f, why in reversed(result.unapplied)}
    counts = Counts(migrated_line=_migrated_lines(result))
    import_gone = _pruned_imports(result)
    # a fix that applied but leaves its construct slow (Edit.advisory): an advisory
    slow = {(e.path, e.cell, e.line, e.rule): e.advisory for e in result.edits if e.advisory}
    for f in result.scan.findings:
        fix = f.fix[target]
        applied = fix["kind"] == "auto" and id(f) not in unapplied
        if applied and (f.path, f.cell, f.line, f.rule) in slow:
            counts.advisory.append((f, slow[f.path, f.cell, f.line, f.rule]))
            continue
        if applied or import_gone(f):
            counts.converted.append(f)
            continue
        why = unapplied.get(id(f), fix["hint"])
        bucket = counts.advisory if is_advisory(f.category) else counts.left
        bucket.append((f, why))
    return counts


def _pruned_imports(result: MigrationResult) -> Callable[[Finding], bool]:
    """Whether a finding is an import the migrated file no longer makes: the codemods
    replaced every use of what it imported (apex's FusedAdam became torch.optim.AdamW) and
    the import went with the last one, so nothing is left for a human on that line."""
    changes = {c.path: c for c in result.changes}
    kept: dict[str, set[tuple[str, str]] | None] = {}

    def gone(f: Finding) -> bool:
        change = changes.get(f.path)
        if change is None or f.cell is not None:
            return False
        imported = _imports(f.snippet)
        if not imported:
            return False
        if f.path not in kept:
            kept[f.path] = _imports(change.after)
        remaining = kept[f.path]
        return remaining is not None and not imported & remaining

    return gone


def _imports(source: str) -> set[tuple[str, str]] | None:
    """What ``source``'s import statements import, as (module, name) pairs: ("", "apex")
    for ``import apex``, ("apex.optimizers", "FusedAdam") for a from-import (None if
    ``source`` does not parse)."""
    try:
        tree = astparse.parse(source)
    except (SyntaxError, ValueError):
        return None
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(("", alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update((node.module, alias.name) for alias in node.names)
    return found


def _migrated_lines(result: MigrationResult) -> Callable[[Finding], int]:
    """A finding's line in the migrated file (notebook cells keep their own numbering)."""
    changes = {c.path: c for c in result.changes}
    maps: dict[str, Callable[[int], int]] = {}  # diffed on first use: few files have entries

    def migrated(f: Finding) -> int:
        change = changes.get(f.path)
        if change is None or f.cell is not None:
            return f.line
        if f.path not in maps:
            maps[f.path] = line_map(change.before, change.after)
        return maps[f.path](f.line)

    return migrated
