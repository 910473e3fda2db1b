"""Every path an MCP client gives is confined to the repository the server was started on.

A coding agent's tool call is untrusted input: a path may climb out (``../..``), be
absolute elsewhere (``/etc``), or pass through a symlink the repository holds that points
outside it. Each is refused with a message that says which and why; a path inside the
repository, relative or absolute, is answered with its resolved form.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class OutsideRepository(ValueError):
    """A path a tool was given leaves the repository (or cannot be a path at all)."""


def confined(repo: Path, given: str) -> tuple[Path, str]:
    """``given`` (relative to ``repo``, or absolute inside it) resolved, and its path
    relative to ``repo`` (``.`` for the repository itself). ``repo`` is resolved already."""
    if not given or "\x00" in given:
        raise OutsideRepository(f"not a path: {given!r}")
    path = Path(given)
    if ".." in PurePosixPath(given).parts:
        raise OutsideRepository(
            f"{given}: '..' is refused; paths are relative to the repository {repo}"
        )
    candidate = path if path.is_absolute() else repo / path
    resolved = candidate.resolve()
    if not resolved.is_relative_to(repo):
        through = " through a symlink" if candidate.absolute().is_relative_to(repo) else ""
        raise OutsideRepository(
            f"{given} leads outside the repository{through}: this server is confined to {repo}"
        )
    return resolved, resolved.relative_to(repo).as_posix() or "."


def confined_file(repo: Path, given: str) -> str:
    """A file of the repository by its path relative to it (it need not exist yet)."""
    resolved, rel = confined(repo, given)
    if resolved.is_dir():
        raise OutsideRepository(f"{given} is a folder, not a file")
    return rel
