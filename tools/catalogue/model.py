"""The catalogue's vocabulary: what a rule is, independent of how it is matched.

Rules are data (TOML under ``data/``, one Markdown doc per rule under ``docs/``);
this module only gives that data a typed shape so that the scanner, the reports
and, later, the rewriter agree on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..targets import profiles

# The targets, in the order of their profiles (tools/data/targets.toml, then any
# TORCHPORT_TARGET_PROFILES file).
TARGETS: tuple[str, ...] = tuple(profiles())

CATEGORIES: tuple[str, ...] = (
    "device",
    "amp",
    "distributed",
    "memory",
    "timing",
    "rng",
    "backend-flags",
    "kernels",
    "dtype",
    "serialization",
    "dataloader",
    "compile",
    "dependency",
    "performance",
)


# The keys a rule's ``match`` table may use: the matcher kinds and their modifiers that
# ``tools.pymatch`` understands (its module docstring says what each means). A key
# outside this set would be ignored by the matcher, so a typo would silently match
# nothing: the catalogue refuses it at load.
MATCH_KEYS: frozenset[str] = frozenset(
    {
        "ref",
        "method",
        "attr",
        "kwarg",
        "string",
        "built_string",
        "import",
        "custom",
        "called",
        "decorator",
        "str_arg",
        "kw_contains",
        "without_kw",
        "max_pos",
        "any_str",
        "has_kw",
        "in_training_loop",
    }
)


class Severity(StrEnum):
    """How badly a construct breaks a port.

    error: fails on the target; warning: runs but wrongly, silently on CPU, or
    slowly; info: worth knowing, harmless as it stands.
    """

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class FixKind(StrEnum):
    """Who resolves a finding for a target.

    auto: a deterministic codemod; llm: the rewriter's model, through AST tools;
    manual: a human; none: nothing to do on this target (the finding is hidden
    when scanning for it).
    """

    AUTO = "auto"
    LLM = "llm"
    MANUAL = "manual"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Fix:
    kind: FixKind
    hint: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "hint": self.hint}


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    name: str
    title: str
    category: str
    severity: Severity
    message: str
    fixes: dict[str, Fix]
    match: dict[str, Any]
    supersedes: tuple[str, ...] = ()
    doc: str = ""
    languages: tuple[str, ...] = ("python",)
    text_patterns: tuple[str, ...] = field(default=())
    # Fixes that differ in non-Python files (a YAML value cannot hold a run-time choice).
    text_fixes: dict[str, Fix] = field(default_factory=dict)
    # "cuda": a CUDA construct, always reported. "target": what a target needs of any code
    # (an XLA step boundary), reported only when scanning for a target that needs it.
    scope: str = "cuda"

    def to_json(self) -> dict[str, Any]:
        """The rule as data: what ``torchport rules CODE --format json`` prints and the MCP
        server's ``explain_rule`` answers."""
        return {
            "code": self.code,
            "name": self.name,
            "title": self.title,
            "category": self.category,
            "severity": self.severity.value,
            "message": self.message,
            "fix": {target: fix.to_json() for target, fix in self.fixes.items()},
            "doc": self.doc,
        }

    def fixes_for(self, in_text: bool) -> dict[str, Fix]:
        return {**self.fixes, **self.text_fixes} if in_text else self.fixes

    def applies_to(self, target: str | None) -> bool:
        """A rule whose fix for ``target`` is ``none`` is not a finding for that target; a
        target-scope rule is a finding only for a target."""
        if target is None:
            return self.scope == "cuda"
        return self.fixes[target].kind is not FixKind.NONE
