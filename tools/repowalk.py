"""Find the files of a repository worth scanning, and say why others were skipped.

The walk honours ``.gitignore`` files (git's own pattern semantics, through
pathspec), skips virtual environments, build output and caches, and never
follows a symbolic link: a link is either reported (pointing out of the
repository, or broken) or left to be scanned at its real path.

``--exclude`` patterns (and the project's ``exclude`` setting) are read the same way,
as one more ignore file at the repository's root: gitignore syntax, relative to the
root, later patterns winning, ``!PATTERN`` taking back what an earlier one excluded.
An excluded folder is not entered, so, as in git, nothing inside it can be taken back.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from ..sandbox.safepath import read_regular
from . import kernel_runtime
from .findings import Skipped

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "build",
        "dist",
        "site-packages",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".eggs",
        ".idea",
        ".vscode",
        "torchport-report",
    }
)

# File kinds the scanner understands, by exact name first, then by suffix.
KIND_BY_NAME = {
    "Makefile": "make",
    "makefile": "make",
    "GNUmakefile": "make",
    "Dockerfile": "docker",
    "pyproject.toml": "pyproject",
    "setup.cfg": "setup",
    "Pipfile": "requirements",
}
KIND_BY_SUFFIX = {
    ".py": "python",
    ".pyw": "python",
    ".ipynb": "notebook",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".mk": "make",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".json": "json",
    ".md": "markdown",
    ".rst": "markdown",
    ".slurm": "shell",
    ".sbatch": "shell",
}


def file_kind(rel: str) -> str | None:
    """The scanner's name for a file's language, or None for files it ignores."""
    name = rel.rsplit("/", 1)[-1]
    if name in KIND_BY_NAME:
        return KIND_BY_NAME[name]
    lower = name.lower()
    if lower.startswith("requirements") and lower.endswith((".txt", ".in")):
        return "requirements"
    if lower.startswith(("environment", "conda")) and lower.endswith((".yml", ".yaml")):
        return "conda"
    if lower.startswith("dockerfile"):
        return "docker"
    return KIND_BY_SUFFIX.get(os.path.splitext(lower)[1])


@dataclass(frozen=True, slots=True)
class RepoFile:
    path: Path
    rel: str
    kind: str
    size: int


class _IgnoreStack:
    """The .gitignore files in effect for a directory, each relative to its own folder."""

    def __init__(self) -> None:
        self.specs: list[tuple[str, pathspec.PathSpec]] = []

    def push(self, rel_dir: str, directory: Path) -> bool:
        try:  # a regular file of the scanner's size at most: not a link, FIFO or device
            data = read_regular(directory / ".gitignore")
        except OSError:
            return False
        lines = data.decode("utf-8", "replace").splitlines()
        self.specs.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(lines)))
        return True

    def pop(self) -> None:
        self.specs.pop()

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for base, spec in self.specs:
            sub = rel[len(base) + 1 :] if base else rel
            if spec.match_file(sub + "/" if is_dir else sub):
                return True
        return False


class ExcludeError(ValueError):
    """An exclude pattern git's syntax cannot read (the message names it)."""


def exclude_spec(patterns: Iterable[str]) -> pathspec.PathSpec | None:
    """The exclude patterns as one gitignore-style spec (None when there are none)."""
    patterns = [p for p in patterns if p.strip()]
    for pattern in patterns:
        try:
            pathspec.GitIgnoreSpec.from_lines([pattern])
        except (ValueError, TypeError) as exc:
            raise ExcludeError(f"bad exclude pattern {pattern!r}: {exc}") from None
    return pathspec.GitIgnoreSpec.from_lines(patterns) if patterns else None


def is_excluded(spec: pathspec.PathSpec | None, rel: str, is_dir: bool = False) -> bool:
    """Whether ``rel`` (relative to the root, '/'-separated) or a folder above it is excluded."""
    if spec is None:
        return False
    parts = rel.split("/")
    folders = ("/".join(parts[:i]) + "/" for i in range(1, len(parts)))
    return any(spec.match_file(f) for f in folders) or spec.match_file(rel + "/" * is_dir)


def walk_repo(
    root: Path, skipped: list[Skipped], exclude: Iterable[str] = ()
) -> Iterator[RepoFile]:
    """Yield scannable files under ``root`` in a stable order; append skips to ``skipped``.
    Files and folders ``exclude`` matches are left out silently, as ignored ones are."""
    root = root.resolve()
    ignores = _IgnoreStack()
    spec = exclude_spec(exclude)
    if spec is not None:
        ignores.specs.append(("", spec))
    yield from _walk_dir(root, root, "", ignores, skipped)


def _walk_dir(
    root: Path, directory: Path, rel_dir: str, ignores: _IgnoreStack, skipped: list[Skipped]
) -> Iterator[RepoFile]:
    pushed = ignores.push(rel_dir, directory)
    try:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(Skipped(rel_dir or ".", f"unreadable directory: {exc.strerror}"))
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_symlink():
                reason = _symlink_reason(root, Path(entry.path))
                if (reason and file_kind(rel)) or (reason and _points_to_dir(entry.path)):
                    skipped.append(Skipped(rel, reason))
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIP_DIRS or entry.name.endswith(".egg-info"):
                    continue
                if (Path(entry.path) / "pyvenv.cfg").exists():
                    continue  # a virtualenv under any name
                if ignores.ignored(rel, is_dir=True):
                    continue
                yield from _walk_dir(root, Path(entry.path), rel, ignores, skipped)
            elif entry.is_file(follow_symlinks=False):
                kind = file_kind(rel)
                if kind is None or ignores.ignored(rel, is_dir=False):
                    continue
                if _shipped(entry):
                    skipped.append(Skipped(rel, SHIPPED_REASON))
                    continue
                yield RepoFile(
                    Path(entry.path), rel, kind, entry.stat(follow_symlinks=False).st_size
                )
    finally:
        if pushed:
            ignores.pop()


SHIPPED_REASON = "a file torchport ships into a port (tools/kernel_runtime), unchanged"


def _shipped(entry: os.DirEntry) -> bool:
    """A runtime torchport shipped into an earlier port, as it shipped it."""
    if entry.name not in kernel_runtime.SHIPPED:
        return False
    try:
        return kernel_runtime.is_shipped_copy(entry.name, read_regular(Path(entry.path)))
    except OSError:
        return False


def _points_to_dir(path: str) -> bool:
    try:
        return os.path.isdir(path)
    except OSError:
        return False


def _symlink_reason(root: Path, link: Path) -> str | None:
    """Why a symlink is not scanned, when that is worth saying (None: its target is scanned)."""
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return "broken symlink (not followed)"
    if not target.is_relative_to(root):
        return "symlink out of the repository (not followed)"
    return None
