"""The ``async=`` keyword argument of PyTorch before 0.4, which Python 3.7+ cannot parse.

PyTorch 0.3 spelt the asynchronous-copy flag ``async`` (``x.cuda(async=True)``,
``x.type(t, async=True)``); when Python 3.7 made ``async`` a reserved word, PyTorch 0.4
renamed the keyword ``non_blocking`` with the same meaning. A file that still passes
``async=`` is a SyntaxError on every Python >= 3.7: no codemod can parse it and no run can
import it. ``repaired`` renames exactly those keyword arguments of calls (never a
definition's parameter, which no caller's rename could follow) and keeps the result only
when it then parses, so a file with any other syntax error is left as it was. Every rename
is returned so that the migration and the verdict list it like any other change.
"""

from __future__ import annotations

import io
import keyword
import tokenize
from dataclasses import dataclass

from torchport.sandbox import astparse

OLD, NEW = "async", "non_blocking"
WHY = (
    "`async=` is a reserved word since Python 3.7 (a SyntaxError); PyTorch 0.4 renamed the "
    "keyword `non_blocking=`, with the same meaning"
)
_OPEN, _CLOSE = "([{", ")]}"


@dataclass(frozen=True)
class Rename:
    """One ``async=`` keyword renamed: where (1-based line, 0-based column) and the line."""

    line: int
    col: int
    before: str  # the source line as it was
    after: str  # the source line renamed


@dataclass(frozen=True)
class Repaired:
    text: str
    renames: tuple[Rename, ...]


def _parses(text: str) -> bool:
    try:
        astparse.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _is_call(previous: tokenize.TokenInfo | None, before: tokenize.TokenInfo | None) -> bool:
    """An opening ``(`` after a callee: a name that is no keyword (and not the name a
    ``def``/``class`` defines), or a closing bracket (``f(x)(async=1)``, ``a[0](...)``)."""
    if previous is None:
        return False
    if previous.type == tokenize.NAME:
        if keyword.iskeyword(previous.string):
            return False
        return not (before is not None and before.string in ("def", "class"))
    return previous.string in (")", "]")


def _sites(text: str) -> list[tuple[int, int]]:
    """(line, col) of each ``async`` that is a keyword argument of a call."""
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)
    ]
    found, stack = [], []  # stack: for each open bracket, whether it is a call's "("
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in _OPEN:
            prev = tokens[i - 1] if i > 0 else None
            before = tokens[i - 2] if i > 1 else None
            stack.append(tok.string == "(" and _is_call(prev, before))
        elif tok.type == tokenize.OP and tok.string in _CLOSE:
            if stack:
                stack.pop()
        elif (
            tok.type == tokenize.NAME
            and tok.string == OLD
            and stack
            and stack[-1]
            and i + 1 < len(tokens)
            and tokens[i + 1].string == "="
            and tokens[i - 1].string in ("(", ",")
        ):
            found.append(tok.start)
    return found


def repaired(text: str) -> Repaired | None:
    """``text`` with each ``async=`` keyword argument of a call renamed ``non_blocking=``,
    when ``text`` does not parse and the renamed text does; None otherwise (it parses as
    it is, has no such keyword, or has another syntax error as well)."""
    if _parses(text):
        return None
    try:
        sites = _sites(text)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    if not sites:
        return None
    lines = text.splitlines(keepends=True)
    renames = []
    for line, col in sorted(sites, reverse=True):  # right to left: columns stay valid
        old = lines[line - 1]
        lines[line - 1] = old[:col] + NEW + old[col + len(OLD) :]
        renames.append((line, col, old))
    new_text = "".join(lines)
    if not _parses(new_text):
        return None
    new_lines = new_text.splitlines()
    return Repaired(
        new_text,
        tuple(
            Rename(line, col, before.rstrip("\r\n"), new_lines[line - 1])
            for line, col, before in sorted(renames)
        ),
    )
