"""What a batch migrates: SOURCES (a folder of repositories, or a list file) as named sources.

Every problem with the list is found here, before any job starts, and reported
with the line it comes from: a batch of hundreds of repositories should not
fail an hour in on a typo. Names are the batch's keys (``DIR/results/NAME.json``
says NAME is done), so they must be unique and safe as file names; a name is
never made unique by silently numbering it, because a resumed batch must give
every repository the name it had before.
"""

from __future__ import annotations

import csv
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from torchport.tools.gitsafe import GitError, not_an_option

from ..project_config import entry_command

# scheme://... (https, ssh, git, file) or scp-like user@host:path
_GIT_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[\w.-]+@[\w.-]+:)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SKIPPED_FOLDERS = {"__pycache__", "node_modules"}


class SourcesError(ValueError):
    """SOURCES cannot be used as it is; the message says where and why."""


@dataclass(frozen=True)
class Source:
    """One repository of the batch: where it is, which ref, and the name it is filed under."""

    name: str
    location: str  # an absolute local path, or a git URL as written
    ref: str | None = None
    git: bool = False  # cloned (and REF checked out) instead of read in place
    entry: str | None = None  # how to run it (migrate's --entry); None: the planner's choice


def read_sources(spec: str | Path, exclude: Path | None = None) -> list[Source]:
    """The repositories SOURCES names, in its order; ``exclude`` (the batch's DIR) is skipped.

    Raises SourcesError for a missing SOURCES, an empty list, a malformed line, a path
    that does not exist, or two repositories with the same name.
    """
    path = Path(spec).expanduser()
    if not path.exists():
        raise SourcesError(f"SOURCES {spec}: no such file or folder")
    if path.is_dir():
        found = _from_folder(path.resolve(), exclude.resolve() if exclude else None)
    elif path.suffix.lower() == ".csv":
        found = _from_csv(path.resolve())
    else:
        found = _from_text(path.resolve())
    if not found:
        what = "no subfolders" if path.is_dir() else "no entries"
        raise SourcesError(f"SOURCES {spec}: {what}; nothing to migrate")
    _check_unique(found)
    return [source for source, _ in found]


def safe_name(text: str) -> str:
    """``text`` as a file name: letters, digits, '.', '_' and '-' only, never hidden."""
    return _UNSAFE.sub("-", text).strip(".-")


def is_git_url(text: str) -> bool:
    return bool(_GIT_URL.match(text))


def _from_folder(folder: Path, exclude: Path | None) -> list[tuple[Source, str]]:
    found = []
    for child in sorted(folder.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or child.name in _SKIPPED_FOLDERS:
            continue
        resolved = child.resolve()
        if exclude is not None and resolved == exclude:
            continue  # the batch's own output folder, kept beside the repositories
        if exclude is not None and resolved in exclude.parents:
            raise SourcesError(
                f"--out {exclude} is inside the repository {child}; choose a folder outside it"
            )
        found.append(_entry(str(resolved), None, None, folder, f"{folder}/{child.name}"))
    return found


def _from_text(path: Path) -> list[tuple[Source, str]]:
    found = []
    for number, line in enumerate(_read(path).splitlines(), start=1):
        where = f"{path.name}:{number}"
        try:
            fields = shlex.split(line, comments=True)
        except ValueError as exc:
            raise SourcesError(f"{where}: {exc}") from exc
        if not fields:
            continue
        fields, command = _split_entry(fields, where)
        if len(fields) > 3 or not fields:
            raise SourcesError(
                f"{where}: expected `PATH_OR_GIT_URL [REF [NAME]] [-- ENTRY]`, got "
                f"{len(fields)} fields before the entry (quote a path that has spaces)"
            )
        location = fields[0]
        ref, name = (*fields[1:], None, None)[:2]
        if ref == "-":  # `PATH - NAME`: a name without a ref
            ref = None
        found.append(_entry(location, ref, name, path.parent, where, command))
    return found


def _split_entry(fields: list[str], where: str) -> tuple[list[str], str | None]:
    """``PATH [REF [NAME]] -- python train.py --lr 0.1``: the fields before the first
    ``--``, and the command after it, quoted again so the planner splits it back whole."""
    if "--" not in fields:
        return fields, None
    at = fields.index("--")
    if at + 1 == len(fields):
        raise SourcesError(f"{where}: nothing after `--`; give the entry command or drop `--`")
    return fields[:at], shlex.join(fields[at + 1 :])


def _from_csv(path: Path) -> list[tuple[Source, str]]:
    rows = csv.reader(_read(path).splitlines())
    header = [h.strip().lower() for h in next(rows, [])]
    if "source" not in header:
        raise SourcesError(
            f"{path.name}:1: a CSV list needs a header row with a `source` column "
            "(and optional `ref`, `name` and `entry` columns)"
        )
    found = []
    for number, row in enumerate(rows, start=2):
        cells = dict(zip(header, (c.strip() for c in row), strict=False))
        location = cells.get("source", "")
        if not location or location.startswith("#"):
            continue
        where = f"{path.name}:{number}"
        ref, name, command = cells.get("ref"), cells.get("name"), cells.get("entry")
        found.append(_entry(location, ref, name, path.parent, where, command))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise SourcesError(f"cannot read SOURCES {path}: {exc}") from exc


def _entry(
    text: str,
    ref: str | None,
    name: str | None,
    base: Path,
    where: str,
    command: str | None = None,
) -> tuple[Source, str]:
    ref = ref or None
    if ref is not None:
        try:
            not_an_option(ref)
        except GitError as exc:
            raise SourcesError(f"{where}: {exc}") from None
    command = _checked_command(command, where)
    if is_git_url(text):
        location, git = text, True
        if text.startswith("file://") and not Path(text[len("file://") :]).exists():
            raise SourcesError(f"{where}: no such repository: {text}")
    else:
        path = (base / Path(text).expanduser()).resolve()
        if not path.is_dir():
            problem = "not a folder" if path.exists() else "no such folder"
            raise SourcesError(f"{where}: {problem}: {text}")
        bare = _is_bare(path)
        git = bool(ref) or bare or path.suffix == ".git"
        if ref and not bare and not (path / ".git").exists():
            raise SourcesError(f"{where}: {text} has a ref ({ref}) but is not a git repository")
        location = str(path)
    if name:
        if safe_name(name) != name:
            raise SourcesError(
                f"{where}: name {name!r} is not safe as a file name "
                "(use letters, digits, '.', '_' and '-')"
            )
    else:
        name = safe_name(_basename(location))
        if not name:
            raise SourcesError(f"{where}: cannot name {text!r}; give it a name")
    return Source(name, location, ref, git, command), where


def _checked_command(command: str | None, where: str) -> str | None:
    """An entry command as migrate's ``--entry`` takes it, or None; one that does not
    split as a shell would (an open quote) is refused here, not in the job."""
    if not command or not command.strip():
        return None
    try:
        return entry_command(command.strip())
    except ValueError as exc:
        raise SourcesError(f"{where}: entry {command!r} {exc}") from exc


def _basename(location: str) -> str:
    tail = re.split(r"[/:\\]", location.rstrip("/\\"))[-1]
    return tail[: -len(".git")] if tail.endswith(".git") else tail


def _is_bare(path: Path) -> bool:
    return all((path / part).exists() for part in ("HEAD", "objects", "refs"))


def _check_unique(found: list[tuple[Source, str]]) -> None:
    seen: dict[str, str] = {}
    for source, where in found:
        key = source.name.lower()  # case-insensitive file systems (macOS) would merge them
        if key in seen:
            raise SourcesError(
                f"{where}: the name {source.name!r} is already used by {seen[key]}; "
                "give each repository its own name (NAME after REF in a text list, "
                "or a `name` column in a CSV list)"
            )
        seen[key] = where
