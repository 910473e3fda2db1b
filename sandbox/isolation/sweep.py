"""Remove what killed torchport runs left behind: scratch folders, cgroups, containers.

The watchdog cleans up after a torchport that dies during a run, but not one
killed while it copied a repository or made a cgroup, nor one whose watchdog
was killed with it. Each such leftover is named with its owner (``owner.tag``),
so the next torchport removes exactly those whose owner is gone, and nothing
else: not a live run's, not another user's, not one of another pid namespace,
not anything named otherwise. Cheap (a directory listing, a ``docker ps`` when
docker answers), so it runs once per process, at its first sandboxed run.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from . import docker, owner
from .cgroup import PREFIX, torchport_cgroups

log = logging.getLogger(__name__)

_FOLDER = re.compile(rf"{re.escape(owner.RUN_PREFIX)}{owner.TAG}-\w+")
_CGROUP = re.compile(rf"{re.escape(PREFIX)}{owner.TAG}-[0-9a-f]+")
_OWNER = re.compile(owner.TAG)
_lock = threading.Lock()
_swept: list[Swept] = []


@dataclass
class Swept:
    """What one sweep removed, by kind."""

    folders: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)


def _stale(pattern: re.Pattern[str], name: str) -> bool:
    found = pattern.fullmatch(name)
    return found is not None and owner.is_gone(found)


def _folders(root: Path) -> list[str]:
    removed = []
    for entry in os.scandir(root):
        if not _stale(_FOLDER, entry.name):
            continue
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            owner.remove_tree(Path(entry.path))
            removed.append(entry.path)
    return removed


def _cgroups() -> list[str]:
    removed = []
    for name, group in torchport_cgroups().items():
        if _stale(_CGROUP, name):
            group.remove()
            removed.append(name)
    return removed


def _containers() -> list[str]:
    if docker.unavailable() is not None:
        return []
    removed = []
    for name, tag in docker.labelled().items():
        if _stale(_OWNER, tag):
            subprocess.run(docker.remove_command(name), capture_output=True, timeout=60)
            removed.append(name)
    return removed


def sweep(temp_root: Path | None = None) -> Swept:
    """Remove the leftovers of dead owners: scratch folders in ``temp_root`` (the
    temp folder by default), cgroups beside this process's, labelled containers."""
    swept = Swept()
    for kind, remove in (
        ("folders", lambda: _folders(temp_root or Path(tempfile.gettempdir()))),
        ("cgroups", _cgroups),
        ("containers", _containers),
    ):
        try:
            setattr(swept, kind, remove())
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("sweeping stale sandbox %s failed: %s", kind, exc)
    if swept.folders or swept.cgroups or swept.containers:
        log.info("swept what killed runs left: %s", swept)
    return swept


def sweep_once() -> Swept:
    """``sweep()`` the first time this process asks; what that sweep removed afterwards."""
    with _lock:
        if not _swept:
            _swept.append(sweep())
        return _swept[0]
