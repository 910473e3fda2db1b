"""Write a whole output beside its destination, then swap it in: a kill leaves old or new.

The new output is built in ``.NAME.torchport-staging-XXXX/tree`` (same parent,
so the final move is a rename), its marker written last. Then the earlier output
is renamed aside to ``.NAME.torchport-old-XXXX``, the new tree renamed to NAME,
and only what the earlier output's marker lists is deleted from the old one. A
kill at any moment leaves at NAME the earlier output, the new one, or nothing
(between the two renames), plus leftovers beside it that the next write sweeps:
folders named by this pattern that carry our staging marker (not locked by a
live writer) or our output marker (and of those, only what it lists), or that
hold no file at all; never anything else.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from . import nofollow
from .destination import Destination, check_destination
from .marker import Marker, listing, marker_rel, read_marker, write_marker

STAGING_MARKER = ".torchport-staging.json"
STAGING, OLD = "staging", "old"


def leftover_pattern(dest: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(dest.name)}\.torchport-({STAGING}|{OLD})-[A-Za-z0-9_]+")


def write_staged(
    dest: Destination,
    source: Path,
    target: str,
    fill: Callable[[Path], None],
    force: bool,
    say: Callable[[str], None],
) -> None:
    """Build the output with ``fill(tree)`` (which creates ``tree``) and swap it in."""
    check_destination(source, dest, force)
    folder = dest.folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    sweep(dest, force, say)
    container = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.torchport-{STAGING}-", dir=folder.parent)
    )
    try:
        with _staging_marker(container, folder):
            tree = container / "tree"
            fill(tree)
            write_marker(tree, dest.report, source, target)
            previous = check_destination(source, dest, force)  # it may have changed meanwhile
            _swap(tree, dest, previous, force, say)
    finally:
        shutil.rmtree(container, ignore_errors=True)


class _staging_marker:
    """Our claim on a staging folder: a marker file, locked while this process writes."""

    def __init__(self, container: Path, destination: Path) -> None:
        self.path = container / STAGING_MARKER
        self.destination = destination
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        record = {"tool": "torchport", "destination": str(self.destination), "pid": os.getpid()}
        os.write(self.fd, json.dumps(record).encode())

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _swap(
    tree: Path, dest: Destination, previous: Marker | None, force: bool, say: Callable[[str], None]
) -> None:
    folder = dest.folder
    old = None
    if previous is not None:
        old = folder.parent / f".{folder.name}.torchport-{OLD}-{secrets.token_hex(4)}"
        os.rename(folder, old)
    elif folder.is_dir() and not folder.is_symlink():
        os.rmdir(folder)  # empty (checked); a file put there since makes this fail, not lose it
    os.rename(tree, folder)
    if old is not None:
        _report_kept(old, remove_output(old, dest.report, force), say)


def remove_output(folder: Path, report: str, force: bool) -> list[str]:
    """Delete what an earlier output's marker lists (unchanged, or any with ``force``), then
    the folders that became empty; returns what is left (nothing, normally)."""
    marker = read_marker(folder, report)
    if marker is None:
        return sorted(p.name for p in folder.iterdir())
    now = listing(folder, skip=marker_rel(report)).entries()
    for rel, held in marker.written.entries().items():
        if rel in now and (force or now[rel] == held):
            nofollow.unlink(folder, rel)
    left = listing(folder, skip=marker_rel(report))
    if not left.files and not left.links and not left.others:
        nofollow.unlink(folder, marker_rel(report))
    for rel in sorted(marker.written.folders, key=lambda r: r.count("/"), reverse=True):
        nofollow.rmdir(folder, rel)
    try:
        os.rmdir(folder)
    except OSError:
        left = listing(folder)
        return sorted([*left.files, *left.links, *left.others])
    return []


def sweep(dest: Destination, force: bool, say: Callable[[str], None]) -> None:
    """Remove what killed writes of this destination left beside it (ours, provably)."""
    pattern = leftover_pattern(dest.folder)
    for entry in os.scandir(dest.folder.parent):
        found = pattern.fullmatch(entry.name)
        if not found or not entry.is_dir(follow_symlinks=False):
            continue
        path = Path(entry.path)
        if found[1] == STAGING and _abandoned_staging(path, dest.folder):
            shutil.rmtree(path)
        elif found[1] == OLD and read_marker(path, dest.report) is not None:
            _report_kept(path, remove_output(path, dest.report, force), say)
        else:  # killed before its marker was written, or after it was removed
            _remove_empty_folders(path)


def _remove_empty_folders(path: Path) -> None:
    """Remove ``path`` if it holds nothing but empty folders; never a file."""
    for here, _, _ in os.walk(path, topdown=False):
        with suppress(OSError):
            os.rmdir(here)


def _abandoned_staging(path: Path, destination: Path) -> bool:
    """Our staging folder for this destination, whose writer is gone (its lock is free)."""
    marker = path / STAGING_MARKER
    try:
        if not stat.S_ISREG(marker.lstat().st_mode):
            return False
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live writer
        try:
            record = json.loads(os.read(fd, 65536) or b"{}")  # empty: killed before writing it
        except ValueError:
            return False
        return isinstance(record, dict) and record.get("destination", str(destination)) == str(
            destination
        )
    finally:
        os.close(fd)


def _report_kept(folder: Path, kept: list[str], say: Callable[[str], None]) -> None:
    if kept:
        say(
            f"kept {folder}: it holds {len(kept)} file(s) torchport did not write or that "
            f"changed ({', '.join(kept[:5])}); nothing there was deleted"
        )
