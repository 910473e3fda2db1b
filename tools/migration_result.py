"""What a migration is asked for and what it produced, as plain data.

Kept apart from ``tools.migrate`` (which computes and writes a migration) so that the
report writers (``tools.report``) can read a result without importing the code that
made it, and ``tools.migrate`` can call them without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .findings import Finding, ScanResult

if TYPE_CHECKING:
    from .codemods import Edit


@dataclass(frozen=True)
class MigrateOptions:
    target: str
    select: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()  # rules never applied nor reported (the project's ``skip``)
    exclude: tuple[str, ...] = ()  # files neither reported nor rewritten (gitignore patterns)
    out: Path | None = None
    in_place: bool = False
    branch: str | None = None
    dry_run: bool = False
    annotate: bool = False
    force: bool = False
    # only the fixes that cannot change what the program computes (``--safe-only``;
    # tools/catalogue/applicability.toml says which those are)
    safe_only: bool = False


@dataclass
class FileChange:
    path: str
    before: str  # "" for a file the port adds (one a fix ships)
    after: str
    ships: tuple[str, ...] = ()  # files of tools/kernel_runtime its fixes need beside it
    written: tuple[tuple[str, str], ...] = ()  # files its fixes generated beside it (name, text)


@dataclass
class MigrationResult:
    root: Path
    target: str
    scan: ScanResult
    changes: list[FileChange] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    unapplied: list[tuple[Finding, str]] = field(default_factory=list)
    output: Path | None = None
    report_dir: Path | None = None
    backup: Path | None = None
    branch: str | None = None
    elapsed_s: float = 0.0

    @property
    def left_for_humans(self) -> list[tuple[Finding, str]]:
        """Findings this target cannot fix automatically, plus auto fixes that did not apply."""
        manual = [
            (f, f.fix[self.target]["hint"])
            for f in self.scan.findings
            if f.fix[self.target]["kind"] != "auto"
        ]
        return manual + self.unapplied
