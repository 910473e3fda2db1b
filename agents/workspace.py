"""Materialise a migration (source tree + overlay of changed files) as a real folder,
and read an edited folder back into an overlay.

The verifier runs a materialised copy; the LLM's tools edit one; neither ever
touches the user's repository.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from torchport.tools.sourcefile import read_exact

_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", "venv", "torchport-report")


def materialize(source: Path, overlay: dict[str, str], dest: Path) -> Path:
    """A fresh copy of ``source`` at ``dest`` with the overlay's files written over it."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, symlinks=True, ignore=_IGNORE)
    for rel, text in overlay.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    return dest


def python_files(work: Path) -> dict[str, Path]:
    """The Python files of a materialised tree, by path relative to it (links not followed:
    a link may point out of the tree)."""
    return {p.relative_to(work).as_posix(): p for p in work.rglob("*.py") if not p.is_symlink()}


def python_sources(work: Path) -> dict[str, str]:
    """The text of each of ``python_files``; a file that is not UTF-8 is left out."""
    texts = {}
    for rel, path in python_files(work).items():
        try:
            texts[rel] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def changed_files(source: Path, work: Path, paths: set[str] | None = None) -> dict[str, str]:
    """Python files in ``work`` whose text differs from ``source`` (or only ``paths``)."""
    overlay: dict[str, str] = {}
    candidates = paths if paths is not None else set(python_files(work))
    for rel in sorted(candidates):
        new = work / rel
        if not new.is_file():
            continue
        text = read_exact(new, errors="surrogateescape")
        old = source / rel
        try:
            before = read_exact(old, errors="surrogateescape")
        except OSError:
            before = None
        if text != before:
            overlay[rel] = text
    return overlay
