"""A migration cut into hunks, each attributed to what made it (a rule's codemod, the LLM,
or a supporting import).

A hunk is one of difflib's non-equal opcodes between an original file and its migrated
text (no context). Chat numbers them so a person can undo them one by one; the HTML
report links each to its rule's documentation. Codemod edits carry a rule code and the
original's line numbers; LLM edits carry the migrated file's.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, TypedDict


class Attribution(TypedDict):
    """What made a hunk: ``codemod``, ``llm`` or ``supporting``, the rules, the reasons."""

    by: str
    rules: list[str]
    reasons: list[str]


class Change(Attribution):
    """One numbered hunk (``split``): chat's undo unit, the HTML report's diff row."""

    id: int
    path: str
    span: list[int]  # difflib's i1, i2, j1, j2


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def opcodes(before: str, after: str) -> list[tuple[str, int, int, int, int]]:
    matcher = difflib.SequenceMatcher(None, lines(before), lines(after), autojunk=False)
    return list(matcher.get_opcodes())


def split(
    base: dict[str, str], proposal: dict[str, str], edits: Iterable[dict[str, Any]] = ()
) -> list[Change]:
    """The proposal's changes, numbered from 1 in file and line order: ``path``, ``span``
    (difflib's ``i1, i2, j1, j2``), ``by`` (``codemod``, ``llm`` or ``supporting``),
    ``rules`` and ``reasons``."""
    edits = list(edits)
    changes: list[Change] = []
    for path in sorted(proposal):
        for tag, i1, i2, j1, j2 in opcodes(base.get(path, ""), proposal[path]):
            if tag == "equal":
                continue
            made = _attribution(path, i1, i2, j1, j2, edits)
            span = [i1, i2, j1, j2]
            changes.append({"id": len(changes) + 1, "path": path, "span": span, **made})
    return changes


def _attribution(
    path: str, i1: int, i2: int, j1: int, j2: int, edits: list[dict[str, Any]]
) -> Attribution:
    rules: list[str] = []
    reasons: list[str] = []
    by = "supporting"  # an import or a line another change needs
    for e in edits:
        if e.get("path") != path:
            continue
        if e.get("by") == "llm":
            start, end = int(e.get("start_line", 0)), int(e.get("end_line", 0))
            if start <= max(j2, j1 + 1) and end >= j1 + 1:
                by = "llm"
                reasons.append(str(e.get("reason", "")))
                if e.get("for"):
                    rules.append(str(e["for"]))
            continue
        start, end = int(e.get("line", 0)), int(e.get("end_line", e.get("line", 0)))
        if start <= max(i2, i1 + 1) and end >= i1 + 1:
            by = "codemod" if by != "llm" else by
            if e.get("rule") and e["rule"] not in rules:
                rules.append(str(e["rule"]))
            if e.get("reason"):
                reasons.append(str(e["reason"]))
    return {"by": by, "rules": rules, "reasons": [r for r in reasons if r]}
