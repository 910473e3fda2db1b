"""Fetch a git source into the batch's folder, at its ref, without touching the original.

Runs inside the job (so a slow or failing clone is that repository's problem and
time, not the batch's), always from scratch: a clone a killed job left half-done
is removed first. Git never prompts (a batch has nobody to answer) and runs none of
the source's hooks or configured programs (``tools.gitsafe``); a ref that git would read
as an option is refused (``gitsafe.not_an_option``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from torchport.tools.gitsafe import Git, GitError, GitNotFound, not_an_option

from .sources import Source


class CloneError(RuntimeError):
    """git could not clone the source or check out its ref; the message has git's reason."""


def checkout(source: Source, dest: Path) -> tuple[Path, str | None]:
    """The folder to migrate and its commit: a local folder as is, a git source cloned to dest."""
    if not source.git:
        return Path(source.location), None
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    if partial.exists():
        shutil.rmtree(partial)
    try:
        Git(None).run("clone", "--quiet", "--", source.location, str(partial))
        cloned = Git(partial)
        if source.ref:
            cloned.run("checkout", "--quiet", not_an_option(source.ref), "--")
        commit = cloned.text("rev-parse", "HEAD")
    except GitNotFound as exc:
        raise CloneError("git is not installed; it is needed for git sources") from exc
    except GitError as exc:
        raise CloneError(str(exc)) from exc
    os.replace(partial, dest)
    return dest, commit
