"""What a scan produces, in the shape every report writer reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .catalogue import Rule

# A finding shows at most this much of its line (stripped): enough to recognise the code,
# short enough for one row of a table.
SNIPPET_CHARS = 200


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    severity: str
    category: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    message: str
    snippet: str
    fix: dict[str, dict[str, str]]
    cell: int | None = None  # 1-based code-cell number for notebooks; lines are cell-relative

    @classmethod
    def of(
        cls,
        rule: Rule,
        path: str,
        span: tuple[int, int, int, int],
        snippet: str,
        cell: int | None = None,
        targets: tuple[str, ...] | None = None,
        in_text: bool = False,
    ) -> Finding:
        line, col, end_line, end_col = span
        fixes = {
            t: f.to_json()
            for t, f in rule.fixes_for(in_text).items()
            if targets is None or t in targets
        }
        return cls(
            rule.code,
            rule.severity.value,
            rule.category,
            path,
            line,
            col,
            end_line,
            end_col,
            rule.message,
            snippet,
            fixes,
            cell,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.cell is None:
            del data["cell"]
        return data

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.col, self.rule)


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Dependency:
    name: str
    spec: str
    path: str
    line: int
    cuda_only: bool


@dataclass(frozen=True, slots=True)
class EntryPoint:
    path: str
    kind: str
    command: str
    score: int
    reasons: tuple[str, ...]


@dataclass
class ScanResult:
    root: str
    target: str | None
    files_scanned: int = 0
    loc: int = 0
    findings: list[Finding] = field(default_factory=list)
    entrypoints: list[EntryPoint] = field(default_factory=list)
    dependencies: list[Dependency] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Plain data that ``from_json`` reads back equal (a run keeps its plan's scan)."""
        return {**asdict(self), "findings": [f.to_json() for f in self.findings]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScanResult:
        return cls(
            root=str(data["root"]),
            target=data.get("target"),
            files_scanned=int(data.get("files_scanned", 0)),
            loc=int(data.get("loc", 0)),
            findings=[Finding(**f) for f in data.get("findings", [])],
            entrypoints=[
                EntryPoint(**{**e, "reasons": tuple(e["reasons"])})
                for e in data.get("entrypoints", [])
            ],
            dependencies=[Dependency(**d) for d in data.get("dependencies", [])],
            skipped=[Skipped(**s) for s in data.get("skipped", [])],
            elapsed_s=float(data.get("elapsed_s", 0.0)),
        )


# --- who a finding is for: the one definition every count uses ---------------------------

# A construct that runs correctly but slowly on the target (an ``.item()`` in the training
# loop): worth a look once the port works, never blocking it, so never "left for a human".
# Scan's summary, the plan line, the migration's summary and manual.md, and chat all count
# through ``work_kind``: a performance finding the target does not fix automatically is an
# advisory, whatever its fix kind says, and every other one counts as its fix kind says.
ADVISORY_CATEGORY = "performance"
WORK_KINDS = ("auto", "llm", "manual", "advisory")  # "none" (nothing to do there) not counted


def is_advisory(category: str | None) -> bool:
    """Whether a finding of ``category`` left unfixed is an advisory, not work for a human."""
    return category == ADVISORY_CATEGORY


def work_kind(kind: str, category: str | None) -> str:
    """``kind`` (a fix's: auto, llm, manual, none) as the counts say it: ``advisory`` for
    a performance finding that is not fixed automatically."""
    return "advisory" if kind in ("llm", "manual") and is_advisory(category) else kind


def work_counts(kinds: Iterable[tuple[str, str | None]]) -> dict[str, int]:
    """Each of ``WORK_KINDS`` -> how many of ``kinds`` ((fix kind, category) pairs) it is."""
    counts = dict.fromkeys(WORK_KINDS, 0)
    for kind, category in kinds:
        shown = work_kind(kind, category)
        if shown in counts:
            counts[shown] += 1
    return counts


def work_line(counts: dict[str, int], llm: str = "an LLM") -> str:
    """``work_counts`` in words, as the plan line says them (graph and chat alike)."""
    advisories = counts["advisory"]
    return (
        f"{counts['auto']} automatic fixes, {counts['llm']} for {llm}, {counts['manual']} for "
        f"a human, {advisories} performance {'advisory' if advisories == 1 else 'advisories'}"
    )
