"""A sandboxed program's own output on our terminal, as it runs (``torchport run``).

The harness captures what the program writes (its tail is part of the result the
verifier reads) and hands each chunk here too. What a program prints is untrusted, so
each line goes through ``terminal_text``: an escape sequence that would retitle the
window or clear the screen is shown escaped. A carriage return ends a line, so a
progress bar shows its updates one per line instead of an escaped ``\\r`` run.
"""

from __future__ import annotations

import codecs
import re
import threading
from typing import IO

from torchport.tools.safetext import terminal_text

_LINE_END = re.compile(r"(\r\n|\r|\n)")
# A line longer than this (a program that never writes a newline) is shown in pieces.
LONGEST_LINE = 64 * 1024


class ProgramEcho:
    """Called with ``("stdout" | "stderr", bytes)`` from the harness's reader threads;
    writes whole lines, escaped, to the stream ``streams`` maps each name to."""

    def __init__(self, streams: dict[str, IO[str]]) -> None:
        self._streams = streams
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in streams
        }
        self._partial = dict.fromkeys(streams, "")
        self._lock = threading.Lock()

    def __call__(self, name: str, chunk: bytes) -> None:
        text = self._partial[name] + self._decoders[name].decode(chunk)
        held = "\r" if text.endswith("\r") else ""  # may be the first half of "\r\n"
        *parts, rest = _LINE_END.split(text[: len(text) - len(held)])
        # text, end, text, end, ...: a carriage return at the start of a line (a progress
        # bar's "\rstep 3") moves nothing along, so it makes no empty line
        lines = [t for t, end in zip(parts[::2], parts[1::2], strict=True) if t or end != "\r"]
        while len(rest) > LONGEST_LINE:
            lines.append(rest[:LONGEST_LINE])
            rest = rest[LONGEST_LINE:]
        self._partial[name] = rest + held
        self._write(name, lines)

    def close(self) -> None:
        """Show what is left of each stream (a last line without a newline)."""
        for name in self._streams:
            rest = (self._partial[name] + self._decoders[name].decode(b"", final=True)).rstrip("\r")
            self._partial[name] = ""
            if rest:
                self._write(name, [rest])

    def _write(self, name: str, lines: list[str]) -> None:
        if not lines:
            return
        stream = self._streams[name]
        with self._lock:  # stdout and stderr may be the same stream
            stream.write("".join(f"{terminal_text(line)}\n" for line in lines))
            stream.flush()
