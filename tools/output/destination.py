"""Whether torchport may write a migration to a folder: checked before any work, and again
right before the folder is replaced.

Refused: the source itself, a folder inside it, any folder that contains it
(``--out ..`` would otherwise replace the source and its siblings), something
that is not a folder, and a non-empty folder that is not torchport's earlier
output of the same source. An earlier output is replaced only when it holds
nothing torchport did not write there, and (without ``--force``) nothing the
user changed since.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from .marker import Listing, Marker, listing, marker_rel, read_marker

SHOWN = 5  # paths named in a message before "and N more"


class OutputError(Exception):
    """The output folder is not safe to write; nothing was written."""


@dataclass(frozen=True)
class Destination:
    """A folder torchport writes as a whole, and where its report (and marker) lie in it."""

    folder: Path  # resolved
    report: str  # relative report folder inside ("" when the folder is the report)

    @property
    def report_dir(self) -> Path:
        return self.folder / self.report if self.report else self.folder

    def in_report(self, name: str) -> str:
        """A report file's path relative to the folder."""
        return f"{self.report}/{name}" if self.report else name


def check_placement(source: Path, folder: Path) -> None:
    """Refuse the source, a folder inside it, or a folder that contains it."""
    if folder == source:
        raise OutputError(f"the output {folder} is the source itself; choose another --out")
    if folder in source.parents:
        raise OutputError(
            f"the output {folder} contains the source {source}: replacing it would delete the "
            "source; choose another --out"
        )
    if source in folder.parents:
        raise OutputError(
            f"the output {folder} is inside the source {source}; choose another --out"
        )


def check_destination(source: Path, dest: Destination, force: bool) -> Marker | None:
    """The earlier output's marker when there is one to replace; raises OutputError when unsafe.

    A missing or empty folder needs no marker (None).
    """
    folder = dest.folder
    check_placement(source, folder)
    try:
        mode = folder.lstat().st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode):
        raise OutputError(f"{folder} exists and is not a folder; choose another --out")
    if not any(folder.iterdir()):
        return None
    marker = read_marker(folder, dest.report)
    if marker is None:
        raise OutputError(
            f"{folder} is not empty and is not a torchport output (no {marker_rel(dest.report)}); "
            "choose another --out (--force never replaces a folder torchport did not write)"
        )
    if not marker.is_for(source):
        raise OutputError(
            f"{folder} holds torchport's output of another source ({marker.source.get('path')}); "
            "choose another --out"
        )
    foreign, edited = compare(marker.written, listing(folder, skip=marker_rel(dest.report)))
    if foreign:
        raise OutputError(
            f"{folder} holds {len(foreign)} file(s) torchport did not write: {_names(foreign)}; "
            "move them away first (--force does not delete them)"
        )
    if edited and not force:
        raise OutputError(
            f"{folder} holds {len(edited)} file(s) changed since torchport wrote them: "
            f"{_names(edited)}; pass --force to replace them"
        )
    return marker


def compare(written: Listing, now: Listing) -> tuple[list[str], list[str]]:
    """(entries torchport did not write, entries it wrote that changed since)."""
    ours, there = written.entries(), now.entries()
    foreign = [rel for rel in there if rel not in ours]
    edited = [rel for rel in there if rel in ours and ours[rel] != there[rel]]
    foreign += [rel for rel in now.folders if rel not in set(written.folders)]
    foreign += now.others
    return sorted(foreign), sorted(edited)


def _names(paths: list[str]) -> str:
    shown = ", ".join(repr(p) if not p.isprintable() else p for p in paths[:SHOWN])
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")
