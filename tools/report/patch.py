"""One file's change as a git-style unified diff that ``git apply`` accepts.

Written by hand around difflib's hunks for two reasons difflib alone gets wrong:
file names are quoted as git quotes them (newlines, tabs, quotes, backslashes and
bytes that are not UTF-8, see ``tools.filenames``), and lines are split at ``\\n``
only, as git splits them (``str.splitlines`` also splits at form feeds, ``\\x1c``
to ``\\x1e``, ``\\x85`` and U+2028, which would put a false "No newline" marker in
the middle of a file).

The text may hold surrogate escapes (a file's bytes that are not UTF-8); write it
with ``errors="surrogateescape"`` so that the patch holds the file's own bytes.
"""

from __future__ import annotations

import difflib

from ..filenames import git_quoted

NO_NEWLINE = "\\ No newline at end of file\n"


def lines_of(text: str) -> list[str]:
    """``text`` split after each ``\\n`` (a ``\\r`` stays on its line, as in git)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _header_name(prefix: str, path: str) -> str:
    """``---``/``+++`` name; git ends one holding a space with a tab, for patch(1)."""
    name = git_quoted(prefix + path)
    return name + "\t" if " " in name else name


def file_patch(path: str, before: str, after: str, new: bool = False) -> str:
    """The change of ``path`` from ``before`` to ``after``; "" when they are equal. ``new``:
    the port adds the file (one a fix ships), which git's patch says as ``/dev/null``."""
    hunks = list(difflib.unified_diff(lines_of(before), lines_of(after), n=3))[2:]
    if not hunks:
        return ""
    head = [
        f"diff --git {git_quoted('a/' + path)} {git_quoted('b/' + path)}\n",
        *(["new file mode 100644\n"] if new else []),
        f"--- {'/dev/null' if new else _header_name('a/', path)}\n",
        f"+++ {_header_name('b/', path)}\n",
    ]
    body = [line if line.endswith("\n") else line + "\n" + NO_NEWLINE for line in hunks]
    return "".join(head + body)
