"""File names that are not plain text, written into text that must stay well formed.

A POSIX file name is bytes. Python shows the bytes that are not UTF-8 as lone
surrogates (PEP 383, ``"caf\\udce9.py"`` for ``b"caf\\xe9.py"``), which no UTF-8
writer accepts, and a name may hold a newline, a tab, quotes or backslashes, which
break line-based formats. Two conventions, each the one its readers already know:

- patches name a file the way git does (``quote_c_style`` in git's quote.c), so that
  ``git apply`` finds it: such a name is written in double quotes with C escapes;
- JSON and other reports for people write each byte that is not UTF-8 as ``\\xNN``
  (what Python's ``backslashreplace`` shows for bytes), so that the text is valid UTF-8
  and valid I-JSON (RFC 7493: no lone surrogates). A name is readable there, but not
  reversible in the rare case that it also holds a literal backslash followed by ``x``:
  the patch is the place where every name is exact.

Every name git can store can be named in a patch this way (a name can hold any byte
but NUL and ``/``), so no file is ever left out of ``changes.patch`` for its name.
"""

from __future__ import annotations

import codecs
import os
import re
from typing import Any

# git's letter escapes; every other control byte, DEL and every byte >= 0x80 as octal
# (git's default core.quotePath=true).
_C_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0B: "\\v",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}

PRINTABLE_ERRORS = "torchport.printable"  # a codec error handler: see ``printable``
_SURROGATE = re.compile("[\ud800-\udfff]")


def _needs_quoting(byte: int) -> bool:
    return byte < 0x20 or byte >= 0x7F or byte in _C_ESCAPES


def _escape_byte(byte: int) -> str:
    return _C_ESCAPES.get(byte) or (f"\\{byte:03o}" if _needs_quoting(byte) else chr(byte))


def git_quoted(name: str) -> str:
    """``name`` as git writes it in a patch header: as is when every byte is printable
    ASCII other than ``"`` and ``\\``, else C-quoted in double quotes."""
    raw = os.fsencode(name)
    if not any(_needs_quoting(b) for b in raw):
        return name
    return '"' + "".join(_escape_byte(b) for b in raw) + '"'


def _printable_errors(error: UnicodeError) -> tuple[str, int]:
    """Undecodable bytes (U+DC80..U+DCFF) as ``\\xNN``; any other lone surrogate as
    ``\\uNNNN``: the replacement ``printable`` documents."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    bad = error.object[error.start : error.end]
    return "".join(_escape_surrogate(c) for c in bad), error.end


def _escape_surrogate(char: str) -> str:
    code = ord(char)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


codecs.register_error(PRINTABLE_ERRORS, _printable_errors)


def printable(text: str) -> str:
    """``text`` with every undecodable byte of a file name (a surrogate escape) written as
    ``\\xNN``: valid UTF-8 for any writer, and the same bytes a person sees in ``ls -b``.

    Text with no surrogates is returned unchanged. Writers that cannot call this on each
    string (a whole report, standard output) use ``errors=PRINTABLE_ERRORS`` instead.
    """
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: _escape_surrogate(m.group()), text)


def printable_data(data: Any) -> Any:
    """``data`` (JSON-shaped: dicts, lists, strings, numbers) with ``printable`` applied to
    every string, keys included: what a JSON report holds instead of a lone surrogate."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, dict):
        return {printable_data(k): printable_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [printable_data(v) for v in data]
    return data
