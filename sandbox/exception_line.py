"""Where a message's traceback says what the run died of: its exception line.

A rank's failure re-raised by its launcher ("-- Process 0 terminated with the following
error: Traceback ...") carries the rank's traceback in its message, and the exception
line is not always its last line: torch's "Could not run 'aten::X' with arguments from
the 'CPU' backend" goes on with one line per dispatch key, each of which reads like an
exception line ("FuncTorchVmapMode: fallthrough registered at ..."). The exception line
is the first line after the last traceback's frames that is not indented. Shared by the
sandboxed run, which clips a long message around that line (``session.clipped``), and
the host, which reads it back (``agents.diagnose``).
"""

from __future__ import annotations

import re

# The start of a traceback, possibly behind a launcher's "[rank1]:" prefix on every line.
TB_START = re.compile(
    r"^(?P<prefix>\[[^\]\n]*\]:\s?)?Traceback \(most recent call last\):\s*$", re.MULTILINE
)
# An exception line: "Type: message" or a bare "Type" (dotted names allowed).
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s|$)")


def exception_start(text: str) -> tuple[int, str] | None:
    """The offset of the last traceback's exception line in ``text`` and the launcher's
    line prefix it carries ("" for none), or None when ``text`` has no traceback or the
    traceback has no exception line (it was cut before it)."""
    starts = list(TB_START.finditer(text))
    if not starts:
        return None
    prefix = starts[-1]["prefix"] or ""
    offset = starts[-1].end()
    for line in text[offset:].splitlines(keepends=True):
        if EXCEPTION_LINE.match(line.removeprefix(prefix)):
            return offset, prefix
        offset += len(line)
    return None
