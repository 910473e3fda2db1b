"""Escaping for text that came from a repository, one function per place it is shown.

A repository is untrusted input: its file names, code, requirements and the
messages its programs print are chosen by whoever wrote it. Every report writer
and every front door passes such text through the function for its destination
before a person's terminal, a Markdown renderer or a spreadsheet sees it. The
machine formats need nothing more than their own encoders (JSON escapes every
control character; SARIF URIs go through ``uri_path``).

Escaping is visible, never silent: a control character becomes ``\\x1b``, a
bidi override ``\\u202e``, so a person sees that the name is odd instead of
being shown a different one. On a terminal, text without such characters is left
unchanged.
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

# C0 controls (ESC starts every terminal escape sequence: OSC 0 titles, OSC 8 links, CSI
# screen clears), DEL, C1 controls (\x9b is a one-byte CSI), lone surrogates (how Python
# holds the bytes of a non-UTF-8 file name), Unicode line separators and the bidi controls
# that reorder what is shown ("Trojan Source": U+202A-U+202E, U+2066-U+2069, marks).
_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
    "\u202a-\u202e\u2066-\u2069\ud800-\udfff"
)
# Another program's failure (pip, an LLM endpoint) is quoted in one message with at most
# this much of its own words: the reason, not a page of its output.
REASON_CHARS = 300

_BLOCK_UNSAFE = re.compile(f"[{_UNSAFE}]")
# ... and, for a single-line field, the newline and tab that would forge a line or a column.
_LINE_UNSAFE = re.compile(f"[\n\t{_UNSAFE}]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}

# CommonMark's backslash-escapable punctuation that starts inline markup wherever it is:
# code, emphasis, links and images, raw HTML and autolinks, entities, GFM table cells and
# strikethrough. With "[" and "<" escaped, no "(", ")" or ":" can form a link.
_MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]<>!&|~])")
# ... and what starts a block at the beginning of a line: a heading, a list item (bullet or
# "1." / "1)"), a setext underline; escaped text has no newline, so only its start can be.
_MARKDOWN_BLOCK = re.compile(r"^( {0,3})(\d*)([#+=.)-])")
_BACKTICKS = re.compile(r"`+")

# OWASP "CSV injection": a spreadsheet evaluates a cell that starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the raw byte of a non-UTF-8 name
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str) -> str:
    """A block of lines (a diff, a message, a rule's doc) safe to print to a terminal.

    Stops escape sequences that retitle the window (OSC 0), plant hyperlinks (OSC 8), clear
    or move over the screen (CSI, also as the one-byte C1 ``\\x9b``), ring the bell or
    backspace over text; a lone carriage return that overprints a line; and bidi controls
    that make code read differently from what it is (Trojan Source). Newlines and tabs
    stay, and CRLF line ends become plain newlines.
    """
    return _BLOCK_UNSAFE.sub(_visible, str(text).replace("\r\n", "\n"))


def terminal_line(text: str) -> str:
    """One field of a line (a file name, a table cell) safe to print to a terminal.

    As ``terminal_text``, and newlines and tabs are escaped too, so a file name cannot
    forge a line of output (a fake finding, a fake ``verdict: verified``) or shift columns.
    """
    return _LINE_UNSAFE.sub(_visible, str(text))


def markdown_text(text: str) -> str:
    """Inline Markdown (a heading, a list item, a table cell) that renders as exactly ``text``.

    Stops raw HTML (``<img onerror=...>``, ``<script>``), links and images (tracking pixels,
    ``javascript:`` URLs), autolinks, entities, emphasis and, at a line start, headings and
    list markers; a ``|`` cannot end a table cell. Newlines and control characters are shown
    escaped, as on a terminal, so the text cannot start a new block. Punctuation that is
    harmless where it stands (``.``, ``-``, ``(``) is left alone, so the file stays readable.
    """
    escaped = _MARKDOWN_INLINE.sub(r"\\\1", terminal_line(text))
    return _MARKDOWN_BLOCK.sub(_escape_block_marker, escaped, count=1)


def _escape_block_marker(match: re.Match[str]) -> str:
    indent, digits, marker = match.groups()
    if marker in ".)" and not digits:
        return match.group()  # "." or ")" starts a list only after a number
    return f"{indent}{digits}\\{marker}"


def markdown_code(text: str, in_table: bool = False) -> str:
    """An inline code span showing ``text`` literally, whatever backticks it holds.

    A span opened by a single backtick ends at the next one, after which the rest of the
    code is Markdown (and raw HTML) again; the span's fence here is one backtick longer than
    the longest run inside, with the padding spaces CommonMark strips when the code starts
    or ends with a backtick. In a table (``in_table``), ``|`` is escaped, because GFM splits
    cells before it looks for code spans.
    """
    code = terminal_line(text)
    if in_table:
        code = code.replace("|", "\\|")
    if not code:
        return "` `"
    longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if code[0] in "` " or code[-1] in "` " else ""
    if code.strip(" ") == "":
        pad = ""  # a span of spaces only keeps them all
    return f"{fence}{pad}{code}{pad}{fence}"


def csv_cell(value: object) -> object:
    """A spreadsheet cell that is shown, never evaluated (OWASP CSV injection).

    A cell that starts with ``= + - @``, a tab or a line break is a formula to Excel,
    LibreOffice and Google Sheets (``=HYPERLINK(...)``, ``=cmd|...``, data exfiltration);
    a leading single quote makes it text. Control characters are shown escaped so that
    printing the file is safe too; numbers and empty cells pass unchanged.
    """
    if not isinstance(value, str):
        return value
    cell = terminal_text(value)
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def uri_path(path: str) -> str:
    """A relative path as an RFC 3986 URI reference (SARIF ``artifactLocation.uri``,
    Markdown link destinations).

    Every byte but the unreserved characters and ``/`` is percent-encoded, so no name can
    add a scheme (``javascript:``), a query, a fragment or break out of the reference;
    a non-UTF-8 name is encoded from its raw bytes, so the URI decodes back to the file.
    """
    return quote(os.fsencode(path), safe="/")


def file_uri(path: str) -> str:
    """An absolute folder as a ``file://`` URI ending in ``/`` (SARIF's ``%SRCROOT%``)."""
    return "file://" + uri_path(path.rstrip("/")) + "/"
