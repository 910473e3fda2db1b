"""Where agent runs keep their checkpoints and scratch copies, and how they are named.

Everything lives under ``$TORCHPORT_HOME`` (default ``~/.cache/torchport``):
``checkpoints.sqlite`` (langgraph's SQLite checkpointer, one thread per run) and
``runs/RUN_ID/`` (scratch copies the verifier and the LLM's tools work in, removed
when the run finishes; a killed run keeps them until it is resumed).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("TORCHPORT_HOME") or Path.home() / ".cache" / "torchport")


def checkpoint_db() -> Path:
    """``$TORCHPORT_CHECKPOINTS`` if set (parallel evaluation jobs each get one)."""
    path = Path(os.environ.get("TORCHPORT_CHECKPOINTS") or home() / "checkpoints.sqlite")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def new_run_id() -> str:
    """Sortable by start time, unique without coordination."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def run_dir(run_id: str) -> Path:
    path = home() / "runs" / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_run_dir(run_id: str) -> None:
    """Delete a finished run's scratch copies (a repository copy or more each).

    Only for a finished migrate run: a killed one keeps its folder for ``--resume``,
    and chat sessions (``chat-*``) keep theirs, which hold /apply's backups.
    """
    if run_id.startswith("chat-") or Path(run_id).name != run_id or run_id in ("", ".", ".."):
        raise ValueError(f"not a migrate run's scratch folder: {run_id!r}")
    shutil.rmtree(home() / "runs" / run_id, ignore_errors=True)
