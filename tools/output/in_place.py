"""``--in-place``: rewrite files of the user's repository, each backed up first.

Every file about to be rewritten, tracked by git or not, is copied (exact bytes
and permissions) to ``torchport-report/backup/<time>/<path>`` inside the
repository before any is rewritten; then each is replaced atomically. Nothing is
written through a symlink: a committed ``torchport-report`` link is refused
before any work, and a file whose path crosses a link is left alone.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

from . import nofollow
from .destination import OutputError

REPORT = "torchport-report"
BACKUP = f"{REPORT}/backup"


def check_in_place(root: Path) -> None:
    """Refuse a report folder (or its backup folder) that is a symlink or not a folder."""
    for rel in (REPORT, BACKUP):
        try:
            mode = (root / rel).lstat().st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise OutputError(
                f"{root / rel} is a symlink: torchport never writes through one; remove it "
                "(or migrate to a copy with --out)"
            )
        if not stat.S_ISDIR(mode):
            raise OutputError(f"{root / rel} is not a folder; move it away first")


def backup_folder(root: Path) -> str:
    """A new backup folder's path relative to ``root`` (one per run, never reused)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rel, n = f"{BACKUP}/{stamp}", 1
    while (root / rel).exists() or (root / rel).is_symlink():
        n += 1
        rel = f"{BACKUP}/{stamp}-{n}"
    return rel


def write_in_place(
    root: Path, changes: dict[str, str], report_files: dict[str, str | bytes], backup: str
) -> int:
    """Back up every file in ``changes``, then rewrite them, then write the report; returns
    how many files were backed up."""
    check_in_place(root)
    saved = 0
    for rel in changes:
        try:
            data, mode = nofollow.read_bytes(root, rel)
        except FileNotFoundError:
            continue  # a new file: nothing to keep
        nofollow.write_bytes(root, f"{backup}/{rel}", data, mode=mode)
        saved += 1
    for rel, text in changes.items():
        nofollow.write_text(root, rel, text)
    for name, content in report_files.items():
        nofollow.write_text(root, f"{REPORT}/{name}", content)
    return saved
