"""Keeping the dependency overlay cache (``$TORCHPORT_HOME/envs``) to a size.

Each distinct set of a repository's requirements gets its own overlay, kept so the next
migration of that repository starts at once. Nothing ever removed one: a machine that
ports many repositories (batch mode, the benchmarks) gathered 78 of them, 8.4 GB, and
went on growing. After an overlay is made, the least recently used others go until the
whole cache is under a budget, ``TORCHPORT_ENV_CACHE_GB`` (default ``DEFAULT_GB``; ``0``
keeps only what is in use). An overlay used in the last ``IN_USE_S`` seconds stays
whatever the budget: a migration running beside this one may be reading it (a migration's
runs end within its own budget, far below that). Use is the time of ``LAST_USED``,
touched whenever an overlay is made or reused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

BUDGET_ENV = "TORCHPORT_ENV_CACHE_GB"
DEFAULT_GB = 4.0
IN_USE_S = 6 * 3600
LAST_USED = ".last-used"
COMPLETE = ".complete"


def used(overlay: Path) -> None:
    """Mark ``overlay`` as used now, for ``evict``'s order and its in-use guard."""
    with contextlib.suppress(OSError):
        (overlay / LAST_USED).touch()


def budget_bytes() -> int:
    """The cache's budget from ``TORCHPORT_ENV_CACHE_GB``; a bad value is the default."""
    try:
        gb = float(os.environ.get(BUDGET_ENV, DEFAULT_GB))
    except ValueError:
        gb = DEFAULT_GB
    return int(max(gb, 0.0) * 1024**3)


def _size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _last_used(overlay: Path) -> float:
    for marker in (LAST_USED, COMPLETE):
        with contextlib.suppress(OSError):
            return (overlay / marker).stat().st_mtime
    return 0.0


def evict(envs: Path, budget: int | None = None, now: float | None = None) -> list[Path]:
    """Remove the least recently used complete overlays under ``envs`` until the rest fit
    in ``budget`` bytes; one used within ``IN_USE_S`` stays. Returns what went."""
    budget = budget_bytes() if budget is None else budget
    now = time.time() if now is None else now
    try:
        overlays = [
            p for p in envs.iterdir() if p.is_dir() and not p.is_symlink() and "." not in p.name
        ]
    except OSError:
        return []
    sizes = {p: _size(p) for p in overlays}
    total = sum(sizes.values())
    gone = []
    for overlay in sorted(overlays, key=_last_used):
        if total <= budget:
            break
        if now - _last_used(overlay) < IN_USE_S:
            continue
        shutil.rmtree(overlay, ignore_errors=True)
        if not overlay.exists():
            total -= sizes[overlay]
            gone.append(overlay)
    return gone
