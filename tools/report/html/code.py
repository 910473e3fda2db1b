"""A file's lines as highlighted, escaped HTML (one string per line).

The whole file is tokenised at once, so a string or docstring spanning lines is coloured
as one; each token is escaped on its own and closed at every line end, so a line is whole
HTML wherever the diff cuts the file. Control characters and bidi overrides are shown as
escapes (``\\x1b``, ``\\u202e``), as on a terminal: code that reads differently from what it
is ("Trojan Source") reads here as what it is.
"""

from __future__ import annotations

import html

from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.token import STANDARD_TYPES, _TokenType
from pygments.util import ClassNotFound

from ...filenames import printable
from ...safetext import terminal_line, terminal_text

# Pygments tokenises some 10,000 lines a second here: a longer file is shown uncoloured,
# so that a large port's page costs seconds, not minutes.
MAX_COLOURED_LINES = 5000


def _lexer(path: str, lines: int) -> Lexer:
    options = {"stripnl": False, "ensurenl": False}
    if lines > MAX_COLOURED_LINES:
        return TextLexer(**options)
    try:
        return get_lexer_for_filename(path, **options)
    except ClassNotFound:
        return TextLexer(**options)


def _css_class(kind: _TokenType) -> str:
    while kind not in STANDARD_TYPES:
        kind = kind.parent
    return STANDARD_TYPES[kind]


def visible(text: str) -> str:
    """``text`` with control characters, bidi controls and undecodable bytes shown escaped."""
    return terminal_text(printable(text))


def visible_name(name: str) -> str:
    """A file name on one line: its newlines and tabs escaped too (``tools.safetext``)."""
    return terminal_line(printable(name))


def highlighted_lines(path: str, text: str) -> list[str]:
    """The lines of ``text`` (the file ``path``) as HTML fragments, without line ends."""
    lines: list[list[str]] = [[]]
    for kind, value in _lexer(path, text.count("\n")).get_tokens(visible(text)):
        css = _css_class(kind)
        for i, piece in enumerate(value.split("\n")):
            if i:
                lines.append([])
            if piece:
                escaped = html.escape(piece)
                lines[-1].append(f'<span class="{css}">{escaped}</span>' if css else escaped)
    if not lines[-1] and text.endswith("\n"):
        lines.pop()  # the file's last line end starts no line
    return ["".join(parts) for parts in lines]
