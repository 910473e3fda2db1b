"""A proposed migration cut into numbered changes a person can inspect and undo one by one.

A change is one hunk of the difference between an original file and its
proposed text (difflib's opcodes, no context). Undoing a change puts that
hunk's original lines back and leaves every other hunk as proposed; because
the opcodes partition both texts, the result is well defined whichever changes
are undone. Changes are plain dicts so they live in the session's checkpoint.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from torchport.tools.report.patch import file_patch
from torchport.tools.safetext import terminal_line


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _opcodes(before: str, after: str) -> list[tuple[str, int, int, int, int]]:
    matcher = difflib.SequenceMatcher(None, _lines(before), _lines(after), autojunk=False)
    return matcher.get_opcodes()


def split(
    base: dict[str, str], proposal: dict[str, str], edits: Iterable[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The proposal's changes, numbered from 1 in file and line order.

    ``edits`` attribute each change to what made it: codemod edits carry a rule
    code and original line numbers; LLM edits carry proposed line numbers.
    """
    edits = list(edits)
    changes: list[dict[str, Any]] = []
    for path in sorted(proposal):
        for tag, i1, i2, j1, j2 in _opcodes(base.get(path, ""), proposal[path]):
            if tag == "equal":
                continue
            change = {"id": len(changes) + 1, "path": path, "span": [i1, i2, j1, j2]}
            change.update(_attribution(path, i1, i2, j1, j2, edits))
            changes.append(change)
    return changes


def _attribution(
    path: str, i1: int, i2: int, j1: int, j2: int, edits: list[dict[str, Any]]
) -> dict[str, Any]:
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


def current(
    base: dict[str, str], proposal: dict[str, str], changes: list[dict[str, Any]], undone: set[int]
) -> dict[str, str]:
    """The overlay the session stands for: the proposal with the undone changes reverted.

    Files whose every change is undone drop out of the overlay.
    """
    undone_spans = {(c["path"], tuple(c["span"])) for c in changes if c["id"] in undone}
    overlay: dict[str, str] = {}
    for path, proposed in proposal.items():
        before = base.get(path, "")
        a, b = _lines(before), _lines(proposed)
        pieces: list[str] = []
        for tag, i1, i2, j1, j2 in _opcodes(before, proposed):
            if tag == "equal" or (path, (i1, i2, j1, j2)) in undone_spans:
                pieces.extend(a[i1:i2])
            else:
                pieces.extend(b[j1:j2])
        text = "".join(pieces)
        if text != before:
            overlay[path] = text
    return overlay


def diff(base: dict[str, str], overlay: dict[str, str], path: str | None = None) -> str:
    """A unified diff of the overlay against the originals (one file, or all), in the form
    ``git apply`` accepts (odd file names quoted as git quotes them)."""
    return "".join(
        file_patch(rel, base.get(rel, ""), overlay[rel])
        for rel in sorted(overlay)
        if path is None or rel == path
    )


def hunk(base: dict[str, str], proposal: dict[str, str], change: dict[str, Any]) -> str:
    """One change as diff lines: the original lines with ``-``, the proposed with ``+``."""
    i1, i2, j1, j2 = change["span"]
    a = _lines(base.get(change["path"], ""))
    b = _lines(proposal[change["path"]])
    header = f"@@ {terminal_line(change['path'])}:{i1 + 1} @@\n"  # a name is one line
    body = [f"-{line}" for line in a[i1:i2]] + [f"+{line}" for line in b[j1:j2]]
    return header + "".join(line if line.endswith("\n") else line + "\n" for line in body)


def at_line(changes: list[dict[str, Any]], path: str | None, line: int) -> dict[str, Any] | None:
    """The change that covers ``line`` (original numbering) of ``path`` (any file if None)."""
    for c in changes:
        i1, i2, _, _ = c["span"]
        if (path is None or c["path"] == path) and i1 + 1 <= line <= max(i2, i1 + 1):
            return c
    return None


def map_line(before: str, after: str, line: int) -> int:
    """Where original line ``line`` is in ``after`` (a changed line: where its change starts).

    People cite the numbers their editor shows, and the repository keeps its
    original text until /apply; the proposal's lines have moved.
    """
    for tag, i1, i2, j1, _ in _opcodes(before, after):
        if i1 < line <= i2:
            return j1 + (line - i1) if tag == "equal" else j1 + 1
    return line
