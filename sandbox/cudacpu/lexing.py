"""Views of C++/CUDA source in which patterns can be searched safely.

The translator edits the source text itself, but it must never match inside a comment or
a string literal, and its structural scan (braces, parentheses) must not see preprocessor
directives. Each view here has the same length as the source and keeps every newline, so
an offset found in a view is the same offset in the source, on the same line.
"""

from __future__ import annotations

import bisect
import re

_RAW_STRING = re.compile(r'R"([^()\\ ]{0,16})\(')


def mask_literals(text: str) -> str:
    """``text`` with comments and the contents of string and character literals blanked
    (quotes kept, so ``extern "C"`` stays recognisable)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c == "R" and (raw := _RAW_STRING.match(text, i)) and not _ident_char(text, i - 1):
            close = f'){raw.group(1)}"'
            end = text.find(close, raw.end())
            end = n if end < 0 else end + len(close)
            blank(raw.end(), end - 1)
            i = end
        elif c in "\"'" and not (c == "'" and _digit_separator(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _ident_char(text: str, i: int) -> bool:
    return i >= 0 and (text[i].isalnum() or text[i] == "_")


def _digit_separator(text: str, i: int) -> bool:
    """A ``'`` between digits (``1'000'000``) is not a character literal."""
    return i > 0 and text[i - 1].isalnum() and i + 1 < len(text) and text[i + 1].isalnum()


def directive_spans(masked: str) -> list[tuple[int, int]]:
    """(start, end) of each preprocessor directive, continuation lines included."""
    spans = []
    for m in re.finditer(r"(?m)^[ \t]*#", masked):
        end = m.start()
        while True:
            nl = masked.find("\n", end)
            if nl < 0:
                end = len(masked)
                break
            if masked[:nl].rstrip(" \t").endswith("\\"):
                end = nl + 1
                continue
            end = nl
            break
        spans.append((m.start(), end))
    return spans


def mask_directives(masked: str) -> str:
    """A literal-masked view with every preprocessor directive blanked as well."""
    out = list(masked)
    for start, end in directive_spans(masked):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "
    return "".join(out)


class Lines:
    """Offsets to 1-based line numbers."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset)


def matching(code: str, start: int, open_: str, close: str) -> int:
    """The offset just past the bracket that closes the one at ``start`` (-1 if none)."""
    depth = 0
    for i in range(start, len(code)):
        c = code[i]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1
