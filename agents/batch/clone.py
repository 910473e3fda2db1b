"""Fetch a git source into the batch's folder, at its ref, without touching the original.

Runs inside the job (so a slow or failing clone is that repository's problem and
time, not the batch's), always from scratch: a clone a killed job left half-done
is removed first. Git never prompts: a batch has nobody to answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .sources import Source

GIT_TIMEOUT_S = 900.0


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
    _git(None, "clone", "--quiet", "--", source.location, str(partial))
    if source.ref:
        _git(partial, "checkout", "--quiet", source.ref, "--")
    commit = _git(partial, "rev-parse", "HEAD").strip()
    os.replace(partial, dest)
    return dest, commit


def _git(cwd: Path | None, *args: str) -> str:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    what = f"git {' '.join(a for a in args if a not in ('--quiet', '--'))}"
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
        )
    except FileNotFoundError as exc:
        raise CloneError("git is not installed; it is needed for git sources") from exc
    except subprocess.TimeoutExpired as exc:
        raise CloneError(f"{what} took longer than {GIT_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise CloneError(f"{what} failed: {lines[-1] if lines else f'exit {done.returncode}'}")
    return done.stdout
