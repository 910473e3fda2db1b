"""The original, runnable on this Python: a copy with PyTorch 0.3's ``async=`` keyword renamed.

A repository written for PyTorch 0.3 passes ``x.cuda(async=True)``: a SyntaxError on every
Python >= 3.7, so its original stops before it runs a line, here and on any current
machine, and there is nothing to compare the port with. PyTorch 0.4 renamed the keyword
``non_blocking`` with the same meaning, and the migration renames it too
(``tools.legacy_keyword``). The reference run then uses a copy of the original with only
that rename, and the verdict lists every renamed line as it lists any stand-in: the
original as written still cannot run on Python 3.7+, and the report must not hide it.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from torchport.tools.legacy_keyword import NEW, OLD, Repaired, repaired
from torchport.tools.repowalk import walk_repo
from torchport.tools.sourcefile import read_exact

MARKER = OLD.encode()


def _renamed(root: Path) -> dict[str, Repaired]:
    """rel -> the file with ``async=`` renamed, for each Python file that needs it."""
    found = {}
    for f in walk_repo(root, []):
        if f.kind != "python":
            continue
        try:
            if MARKER not in f.path.read_bytes():
                continue
            fixed = repaired(read_exact(f.path))
        except (OSError, UnicodeDecodeError):
            continue
        if fixed is not None:
            found[f.rel] = fixed
    return found


def note(renames: list[str]) -> str:
    """What the verdict says of the renames (``cifar.py:248``), or "" for none."""
    if not renames:
        return ""
    return (
        f"the original ran with `{OLD}=` renamed `{NEW}=` ({', '.join(renames)}): the original "
        f"as written is a SyntaxError on Python 3.7 and newer (`{OLD}` is a reserved word), "
        f"and PyTorch 0.4 renamed the keyword with the same meaning"
    )


@contextlib.contextmanager
def runnable_original(source: Path) -> Iterator[tuple[Path, list[str]]]:
    """``(root, renames)``: ``source`` itself and no renames when no file passes
    ``async=``; else a temporary copy with each renamed, and the renamed lines
    (``cifar.py:248``). The copy is removed on exit."""
    fixes = _renamed(source)
    if not fixes:
        yield source, []
        return
    with tempfile.TemporaryDirectory(prefix="torchport-original-") as scratch:
        copy = Path(scratch) / source.name
        shutil.copytree(source, copy, symlinks=True)
        renames = []
        for rel, fixed in sorted(fixes.items()):
            (copy / rel).write_bytes(fixed.text.encode("utf-8"))
            renames += [f"{rel}:{r.line}" for r in fixed.renames]
        yield copy, renames
