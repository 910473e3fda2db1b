"""Each file side by side: the original on the left, the port on the right, the changed
lines marked and linked to the documentation of the rule that changed them, and what is
left for a human shown under the line it concerns (numbered as in the port).

Unchanged lines more than ``CONTEXT`` away from a change or a note are folded into one
row that says how many there are. Ids are the page's own (``f3-R42``: file 3, the port's
line 42), never the repository's words.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from ..hunks import Attribution, Change, opcodes
from .code import highlighted_lines, visible, visible_name

CONTEXT = 3
# a hunk no change names: an import or a line another change needs
SUPPORTING: Attribution = {"by": "supporting", "rules": [], "reasons": []}
NOTE_MARK = "\N{BLACK FLAG}"


@dataclass(frozen=True)
class Row:
    left: int | None  # 0-based line of the original
    right: int | None  # 0-based line of the port
    hunk: Attribution | None  # the change it belongs to; None: unchanged


def rule_links(codes: Iterable[str], documented: Mapping[str, Any]) -> str:
    """Each code as a link to its documentation on this page (plain text if it has none)."""
    return "".join(
        f'<a class="rule" href="#rule-{code}">{code}</a>'
        if code in documented
        else f'<span class="rule">{html.escape(visible(code))}</span>'
        for code in codes
    )


def _rows(before: str, after: str, hunks: Mapping[tuple[int, ...], Change]) -> list[Row]:
    rows: list[Row] = []
    for tag, i1, i2, j1, j2 in opcodes(before, after):
        if tag == "equal":
            rows += [Row(i, j, None) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
            continue
        hunk: Attribution = hunks.get((i1, i2, j1, j2)) or SUPPORTING
        rows += [Row(i, j, hunk) for i, j in zip_longest(range(i1, i2), range(j1, j2))]
    return rows


def _shown(rows: list[Row], note_lines: set[int]) -> list[bool]:
    """Which rows are shown: those near a change or a note."""
    keep = [False] * len(rows)
    for r, row in enumerate(rows):
        if row.hunk is not None or row.right in note_lines:
            for k in range(max(r - CONTEXT, 0), min(r + CONTEXT + 1, len(rows))):
                keep[k] = True
    return keep


def _cells(side: str, fid: str, line: int | None, text: list[str]) -> str:
    if line is None:
        return f'<td class="n {side}"></td><td class="code {side}"></td>'
    anchor = f"{fid}-{side[0].upper()}{line + 1}"
    return (
        f'<td class="n {side}" id="{anchor}">{line + 1}</td>'
        f'<td class="code {side}">{text[line]}</td>'
    )


def _made_by(hunk: Attribution, documented: Mapping[str, Any]) -> str:
    links = rule_links(hunk.get("rules") or [], documented)
    if hunk.get("by") == "llm":
        return f'<span class="rule llm">LLM</span>{links}'
    return links or '<span class="supporting">import / support</span>'


def note_html(note: Any, documented: Mapping[str, Any]) -> str:
    return (
        f"{NOTE_MARK} {rule_links([note.rule], documented)} <strong>{html.escape(note.kind)}"
        f"</strong>: {html.escape(visible(note.text))}"
    )


def _row_html(row: Row, fid: str, left: list[str], right: list[str], documented: Any) -> str:
    made_by = _made_by(row.hunk, documented) if row.hunk is not None else ""
    return (
        f'<tr class="{"eq" if row.hunk is None else "chg"}">'
        + _cells("left", fid, row.left, left)
        + _cells("right", fid, row.right, right)
        + f'<td class="r">{made_by}</td></tr>'
    )


def _folded(count: int) -> str:
    lines = "line" if count == 1 else "lines"
    return f'<tr class="skip"><td colspan="5">{count} unchanged {lines}</td></tr>'


def file_view(
    index: int,
    path: str,
    texts: tuple[str, str],
    hunks: list[Change],
    notes: list[Any],
    documented: Mapping[str, Any],
) -> str:
    """One file's table; ``texts``: the original and the port (equal: a file not changed)."""
    fid = f"f{index}"
    before, after = texts
    left, right = highlighted_lines(path, before), highlighted_lines(path, after)
    rows = _rows(before, after, {tuple(h["span"]): h for h in hunks})
    by_line: dict[int, list[Any]] = {}
    for note in notes:  # past the end: under the last line
        by_line.setdefault(min(max(note.line, 1), max(len(right), 1)) - 1, []).append(note)
    keep = _shown(rows, set(by_line))
    out = [
        f'<table class="diff" id="{fid}"><caption>{html.escape(visible_name(path))}</caption>',
        '<colgroup><col class="n"><col><col class="n"><col><col class="r"></colgroup>',
    ]
    folded = 0
    for row, shown in zip(rows, keep, strict=True):
        if not shown:
            folded += 1
            continue
        if folded:
            out.append(_folded(folded))
            folded = 0
        out.append(_row_html(row, fid, left, right, documented))
        for note in by_line.pop(row.right, []) if row.right is not None else []:
            out.append(f'<tr class="note"><td colspan="5">{note_html(note, documented)}</td></tr>')
    if folded:
        out.append(_folded(folded))
    return "\n".join([*out, "</table>"])
