"""A proposed migration cut into numbered changes a person can inspect and undo one by one.

A change is one hunk of the difference between an original file and its
proposed text (difflib's opcodes, no context). Undoing a change puts that
hunk's original lines back and leaves every other hunk as proposed; because
the opcodes partition both texts, the result is well defined whichever changes
are undone. Changes are plain dicts so they live in the session's checkpoint
(``tools.report.hunks`` cuts and attributes them; the HTML report shows the same hunks).
"""

from __future__ import annotations

from torchport.tools.report.hunks import Change, split
from torchport.tools.report.hunks import lines as _lines
from torchport.tools.report.hunks import opcodes as _opcodes
from torchport.tools.report.patch import file_patch
from torchport.tools.safetext import terminal_line

__all__ = ["at_line", "current", "diff", "hunk", "map_line", "split"]


def current(
    base: dict[str, str], proposal: dict[str, str], changes: list[Change], undone: set[int]
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


def hunk(base: dict[str, str], proposal: dict[str, str], change: Change) -> str:
    """One change as diff lines: the original lines with ``-``, the proposed with ``+``."""
    i1, i2, j1, j2 = change["span"]
    a = _lines(base.get(change["path"], ""))
    b = _lines(proposal[change["path"]])
    header = f"@@ {terminal_line(change['path'])}:{i1 + 1} @@\n"  # a name is one line
    body = [f"-{line}" for line in a[i1:i2]] + [f"+{line}" for line in b[j1:j2]]
    return header + "".join(line if line.endswith("\n") else line + "\n" for line in body)


def at_line(changes: list[Change], path: str | None, line: int) -> Change | None:
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
