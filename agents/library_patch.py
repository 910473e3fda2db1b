"""CUDA inside an installed library: its file ported as the repository was, and delivered as
a patch, where the port's run fails there.

A repository can be clean and its port still fail on the target, because a library it pins
hard-codes CUDA (timm 0.3.2 builds Mixup's targets with ``device='cuda'``; its callers
cannot pass another). No edit of the repository reaches that line, yet porting the library
file is the same job as porting the repository's: the catalogue's codemods, rules only.
When the port's run fails with a CUDA signature inside a package of the dependency overlay
(what torchport installed from the repository's requirements; never torch, torchport or
the interpreter's own packages), that file is ported in a private copy of its package
that the port's next run imports first, at most ``MAX_FILES`` files. The verdict says the
port holds only with the patch, the report carries the patch, and the installed library
stays as it was.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from torchport.tools.migrate import MigrateOptions, migrate
from torchport.tools.sourcefile import read_exact

from .attribution import library_site
from .diagnose import diagnose, load_signatures
from .verification_records import PatchJSON

MAX_FILES = 4
SITE = "library-patches"  # the folder of the patched packages, under the verification's scratch


@dataclass(frozen=True)
class Patch:
    """One installed file ported: the distribution it belongs to, its path inside
    site-packages, the codemods' edits and the unified diff (``patch -p1`` in site-packages)."""

    distribution: str
    version: str
    file: str
    edits: int
    diff: str

    def to_json(self) -> PatchJSON:
        return cast("PatchJSON", asdict(self))


def _cuda_signatures() -> frozenset[str]:
    return frozenset(s.id for s in load_signatures() if s.cuda)


def _installed(inside: str, sites: tuple[str, ...]) -> Path | None:
    """The overlay's file at ``inside`` (``timm/data/mixup.py``), when it is a regular file."""
    if ".." in Path(inside).parts or Path(inside).is_absolute():
        return None
    for site in sites:
        path = Path(site) / inside
        if path.suffix == ".py" and path.is_file() and not path.is_symlink():
            return path
    return None


def failing_file(result: Mapping[str, Any], target: str, sites: tuple[str, ...]) -> str | None:
    """``timm/data/mixup.py`` when ``result`` failed with a CUDA signature in a file of the
    dependency overlay (``sites``), else None."""
    if result.get("status") == "ok" or diagnose(result, target).signature not in _cuda_signatures():
        return None
    site = library_site(result)
    inside = site.rsplit(":", 1)[0] if site else ""
    return inside if inside and _installed(inside, sites) else None


def _distribution(site: Path, inside: str) -> tuple[str, str]:
    for dist in importlib.metadata.distributions(path=[str(site)]):
        if any(str(f).replace("\\", "/") == inside for f in dist.files or ()):
            return dist.metadata["Name"], dist.version
    return inside.split("/", 1)[0], "unknown"


def _ported(text: str, inside: str, target: str) -> tuple[str, int] | None:
    """The file's text as the codemods port it for ``target``, and the edits; None if none."""
    with tempfile.TemporaryDirectory(prefix="torchport-library-") as scratch:
        path = Path(scratch) / inside
        path.parent.mkdir(parents=True)
        path.write_bytes(text.encode("utf-8"))
        result = migrate(scratch, MigrateOptions(target=target, dry_run=True))
    changes = [c for c in result.changes if c.path == inside]
    if not changes or changes[0].after == text:
        return None
    return changes[0].after, sum(1 for e in result.edits if e.path == inside)


def patch_file(inside: str, sites: tuple[str, ...], patched: Path, target: str) -> Patch | None:
    """Port ``inside`` into ``patched`` (a copy of its top-level package made once, read
    first by the port's run); None when the codemods change nothing there."""
    installed = _installed(inside, sites)
    if installed is None:
        return None
    site = Path(str(installed)[: -len(inside)])
    package = inside.split("/", 1)[0]
    if not (patched / package).exists():
        shutil.copytree(site / package, patched / package, symlinks=True)
    before = read_exact(patched / inside)
    ported = _ported(before, inside, target)
    if ported is None:
        return None
    after, edits = ported
    (patched / inside).write_bytes(after.encode("utf-8"))
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{inside}",
        f"b/{inside}",
    )
    return Patch(*_distribution(site, inside), inside, edits, "".join(lines))


def patch_files(patches: list[PatchJSON]) -> dict[str, str]:
    """The report's patch files, one per distribution (``library-timm-0.3.2.patch``)."""
    files: dict[str, str] = {}
    for p in patches:
        name = f"library-{p['distribution']}-{p['version']}.patch"
        files[name] = files.get(name, "") + p["diff"]
    return files


def note(patches: list[PatchJSON]) -> str:
    """The head of the verdict's reason: the port holds only with the patch."""
    if not patches:
        return ""
    where = ", ".join(f"{p['distribution']} {p['version']}'s {p['file']}" for p in patches)
    files = ", ".join(f"torchport-report/{name}" for name in patch_files(patches))
    return (
        f"with {len(patches)} installed library file(s) ported as the repository was ({where}), "
        "where the port's run failed on CUDA that no edit of the repository reaches: the "
        f"target's environment needs the same patch ({files}; `patch -p1` in its "
        "site-packages) or a release of the library that takes the device from its caller"
    )


def next_step(patches: list[PatchJSON]) -> str:
    """How to give the target's environment the patch the verdict holds with."""
    names = ", ".join(f"torchport-report/{name}" for name in patch_files(patches))
    return (
        f"apply {names} to the target's installed library (`patch -p1 -d SITE_PACKAGES < "
        "PATCH`, where `pip show` names its Location), or move to a release of it that takes "
        "the device from its caller"
    )
