"""The marker torchport leaves in every output it writes: what it wrote, for which source.

It is how a later run knows a folder is its own to replace (never by the mere
presence of ``torchport-report/``), and exactly what it may delete there: the
files it lists, when they still hold what torchport wrote. The source is kept by
its resolved path and its identity (device and inode), so a moved or re-cloned
source is still recognised, and another repository's output never is.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .nofollow import sha256_of, write_text

MARKER = ".torchport-output.json"
FORMAT = 1


@dataclass
class Listing:
    """Every entry of a folder, by relative path: file hashes, link targets, folders."""

    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # sockets, fifos, devices

    def entries(self) -> dict[str, str]:
        """Files and links together, each with what it holds (a link: where it points)."""
        found = {rel: f"sha256:{digest}" for rel, digest in self.files.items()}
        found.update({rel: f"link:{target}" for rel, target in self.links.items()})
        return found


def listing(root: Path, skip: str | None = None) -> Listing:
    """What is under ``root``, without following links; ``skip`` (a relative path) is left out."""
    found = Listing()
    for here, dirs, names in os.walk(root, followlinks=False):
        rel_here = os.path.relpath(here, root)
        for name in sorted(dirs + names):
            rel = name if rel_here == "." else f"{rel_here}/{name}"
            if rel == skip:
                continue
            path = Path(here) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                found.links[rel] = os.readlink(path)
            elif stat.S_ISDIR(mode):
                found.folders.append(rel)
            elif stat.S_ISREG(mode):
                found.files[rel] = sha256_of(path)
            else:
                found.others.append(rel)
    found.folders.sort()
    return found


def source_identity(source: Path) -> dict[str, Any]:
    info = source.stat()
    return {"path": str(source), "device": info.st_dev, "inode": info.st_ino}


@dataclass(frozen=True)
class Marker:
    source: dict[str, Any]
    target: str
    written: Listing

    def is_for(self, source: Path) -> bool:
        """The same source: the same resolved path, or the same folder moved elsewhere."""
        mine = source_identity(source)
        same_place = self.source.get("path") == mine["path"]
        same_folder = (self.source.get("device"), self.source.get("inode")) == (
            mine["device"],
            mine["inode"],
        )
        return same_place or same_folder

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "tool": "torchport",
            "source": self.source,
            "target": self.target,
            "files": self.written.files,
            "links": self.written.links,
            "folders": self.written.folders,
        }


def marker_path(folder: Path, report: str) -> Path:
    return folder / report / MARKER if report else folder / MARKER


def marker_rel(report: str) -> str:
    return f"{report}/{MARKER}" if report else MARKER


def write_marker(folder: Path, report: str, source: Path, target: str) -> Marker:
    """List everything in ``folder`` (written by torchport) and record it in the marker."""
    rel = marker_rel(report)
    marker = Marker(source_identity(source), target, listing(folder, skip=rel))
    write_text(folder, rel, json.dumps(marker.to_json(), indent=1, sort_keys=True) + "\n")
    return marker


def read_marker(folder: Path, report: str) -> Marker | None:
    """The folder's marker, or None when it has none (or one torchport cannot have written)."""
    path = marker_path(folder, report)
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    try:
        written = Listing(
            files={str(k): str(v) for k, v in data["files"].items()},
            links={str(k): str(v) for k, v in data["links"].items()},
            folders=[str(f) for f in data["folders"]],
        )
        return Marker(dict(data["source"]), str(data["target"]), written)
    except (KeyError, TypeError, AttributeError):
        return None
