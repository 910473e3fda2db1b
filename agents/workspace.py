"""Materialise a migration (source tree + overlay of changed files) as a real folder,
and read an edited folder back into an overlay.

The verifier runs a materialised copy; the LLM's tools edit one; neither ever
touches the user's repository.
"""

from __future__ import annotations

import os
import shutil
import stat
from contextlib import suppress
from pathlib import Path

from torchport.sandbox.safepath import read_inside, read_text_regular
from torchport.tools.output import nofollow

_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", "venv", "torchport-report")
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def materialize(source: Path, overlay: dict[str, str], dest: Path) -> Path:
    """A fresh copy of ``source`` at ``dest`` with the overlay's files written over it.

    The copy keeps the repository's symlinks, so the overlay is written without following
    one (``write_over``): a file the overlay names that is a link in the copy becomes a
    regular file there, and a folder on its way that is a link is refused (SymlinkInPath),
    never written through to wherever it points."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, symlinks=True, ignore=_IGNORE)
    for rel, text in overlay.items():
        write_over(dest, rel, text.encode("utf-8", "surrogateescape"))
    return dest


def write_over(dest: Path, rel: str, data: bytes) -> None:
    """``dest/rel`` (``dest`` a copy torchport made) replaced by ``data``: its folders
    reached without following a link, a link at its name removed (the copy's link, never
    what it points to)."""
    *folders, name = nofollow.parts_of(rel)
    with nofollow.open_folder(dest, tuple(folders), create=True) as folder:
        with suppress(FileNotFoundError):
            if stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=folder)
        fd = os.open(name, _NEW_FILE, 0o666, dir_fd=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)


def python_files(work: Path) -> dict[str, Path]:
    """The Python files of a materialised tree, by path relative to it (links not followed:
    a link may point out of the tree)."""
    return {p.relative_to(work).as_posix(): p for p in work.rglob("*.py") if not p.is_symlink()}


def python_sources(work: Path) -> dict[str, str]:
    """The text of each of ``python_files``; a file that is not UTF-8 is left out."""
    texts = {}
    for rel, path in python_files(work).items():
        try:  # a regular file of the scanner's size at most (no FIFO, no device)
            texts[rel] = read_text_regular(path)
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def changed_files(source: Path, work: Path, paths: set[str] | None = None) -> dict[str, str]:
    """Python files in ``work`` whose text differs from ``source`` (or only ``paths``)."""
    overlay: dict[str, str] = {}
    candidates = paths if paths is not None else set(python_files(work))
    for rel in sorted(candidates):
        try:  # a regular file inside the copy (a link out of it is no file of the port)
            text = read_inside(work, rel).decode("utf-8", "surrogateescape")
        except OSError:
            continue
        try:
            before = read_inside(source, rel).decode("utf-8", "surrogateescape")
        except OSError:
            before = None
        if text != before:
            overlay[rel] = text
    return overlay
