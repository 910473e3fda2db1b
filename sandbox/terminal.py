"""The answer a terminal gives, for a program the sandbox runs without one.

A sandboxed run has no terminal: standard input is ``/dev/null`` and the output goes to
pipes torchport reads. A module that sizes its progress bar at import with
``rows, columns = os.popen('stty size', 'r').read().split()`` then fails (``stty``
answers "Inappropriate ioctl for device" on standard error and nothing on standard
output), and the program never starts, on the reference as on the port. On a
user's terminal it runs. So the launcher gives every process of the run what an 80x24
terminal answers: ``COLUMNS`` and ``LINES`` (read by ``shutil.get_terminal_size``,
``tput``, rich, tqdm) where the program's environment does not set them, and an ``stty``
first on ``PATH`` that answers ``stty size`` from them and hands every other use to the
system's ``stty`` (which fails there as it would without a terminal).

A pseudo-terminal on standard input would give the same answer, but a program that
reads its input (``input()``, a login prompt of a logger that sees a terminal) would then
wait for the run's whole timeout instead of reading end-of-file at once.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

COLUMNS, LINES = 80, 24  # what a terminal emulator opens at

# The stty stand-in: ``stty size`` answers "LINES COLUMNS"; anything else runs the
# system's stty, found on PATH after the stand-in's own folder.
STTY = """\
#!{python}
import os, shutil, sys
if sys.argv[1:] == ["size"]:
    print(os.environ.get("LINES", "{lines}"), os.environ.get("COLUMNS", "{columns}"))
    sys.exit(0)
own = os.path.dirname(os.path.abspath(__file__))
rest = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != own)
real = shutil.which("stty", path=rest)
if real is None:
    sys.exit("stty: standard input is not a terminal (torchport's sandbox has none)")
os.execv(real, [real, *sys.argv[1:]])
"""


def answer(folder: Path | None = None) -> Path:
    """Set ``COLUMNS``/``LINES`` (unless set) and put the ``stty`` stand-in first on
    ``PATH`` for this process and the ones it starts; returns the stand-in's folder
    (a new one under ``folder``, the run's TMPDIR by default)."""
    os.environ.setdefault("COLUMNS", str(COLUMNS))
    os.environ.setdefault("LINES", str(LINES))
    where = Path(tempfile.mkdtemp(prefix="torchport-terminal-", dir=folder))
    stty = where / "stty"
    stty.write_text(STTY.format(python=sys.executable, lines=LINES, columns=COLUMNS))
    stty.chmod(0o755)
    os.environ["PATH"] = os.pathsep.join([str(where), os.environ.get("PATH", os.defpath)])
    return where
