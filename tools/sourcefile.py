"""Read a source file as text, or say precisely why it cannot be scanned."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import astparse
from ..sandbox.safepath import DEFAULT_MAX_BYTES

# Python 2 constructs that are syntax errors in Python 3: a print statement,
# `except E, e:`, backticks, `exec "..."`, octal literals like 0777, `ur""`.
_PY2_MARKERS = re.compile(
    r"^\s*print\s+[\"'\w]|^\s*except\s+[\w.]+\s*,\s*\w+\s*:|`[^`\n]+`|^\s*exec\s+[\"']"
    r"|\b0\d+\b|\bur[\"']|^\s*raise\s+\w+\s*,",
    re.MULTILINE,
)


class Unscannable(Exception):
    """The file is listed under ``skipped`` with this message as its reason."""


@dataclass(frozen=True, slots=True)
class SourceText:
    text: str
    encoding: str


def read_text(data: bytes, kind: str, max_bytes: int = DEFAULT_MAX_BYTES) -> SourceText:
    if len(data) > max_bytes:
        raise Unscannable(f"larger than {max_bytes} bytes ({len(data)})")
    if b"\0" in data[:8192]:
        raise Unscannable("binary file")
    encoding = "utf-8-sig"
    if kind == "python":
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            if "invalid or missing" in str(exc):
                raise Unscannable("not valid utf-8 text (and no encoding declared)") from exc
            raise Unscannable(f"bad encoding declaration: {exc}") from exc
    try:
        return SourceText(data.decode(encoding), encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        name = "utf-8" if encoding.startswith("utf-8") else encoding
        raise Unscannable(f"not valid {name} text (byte {getattr(exc, 'start', '?')})") from exc


def read_exact(path: Path, errors: str = "strict") -> str:
    """A UTF-8 file's text exactly as on disk: no newline translation, so a CRLF file
    rewritten from it stays CRLF (``Path.read_text`` would turn it into LF everywhere)."""
    return path.read_bytes().decode("utf-8", errors)


def parse_python(text: str, filename: str) -> ast.Module:
    """Parse Python 3 source; a failure names the line and whether it looks like Python 2."""
    try:
        return astparse.parse(text, filename)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "unknown line"
        if _PY2_MARKERS.search(text):
            raise Unscannable(f"Python 2 source (syntax error at {where}: {exc.msg})") from exc
        raise Unscannable(f"syntax error at {where}: {exc.msg}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise Unscannable(f"cannot parse: {type(exc).__name__}: {exc}") from exc
