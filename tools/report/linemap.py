"""Where a line of the original file is in the migrated one.

A reader of manual.md has the migrated tree open, so its entries point there; the
codemods add and remove lines (imports, a device defined once, dropped cuDNN flags),
so the original's numbers drift.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable


def line_map(before: str, after: str) -> Callable[[int], int]:
    """A function from a 1-based line of ``before`` to its 1-based line in ``after``.

    An unchanged line maps exactly, also when a rewrite re-indented it (a device ``if``
    folded into its body); a line inside a rewritten run maps to the same
    offset in its replacement (the replacement's last line when the run shrank); a
    removed line maps to the line that now stands where it was.
    """
    matcher = difflib.SequenceMatcher(None, _code(before), _code(after), autojunk=False)
    opcodes = matcher.get_opcodes()
    total = len(after.splitlines())

    def mapped(line: int) -> int:
        index = line - 1
        for _, i1, i2, j1, j2 in opcodes:
            if i1 <= index < i2:
                if j2 > j1:
                    return j1 + min(index - i1, j2 - j1 - 1) + 1
                return min(j1 + 1, max(total, 1))
        return line

    return mapped


def _code(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]
