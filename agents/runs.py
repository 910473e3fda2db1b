"""Where agent runs keep their checkpoints and scratch copies, and how they are named.

Everything lives under ``$TORCHPORT_HOME`` (default ``~/.cache/torchport``):
``checkpoints.sqlite`` (langgraph's SQLite checkpointer, one thread per run) and
``runs/RUN_ID/`` (scratch copies the verifier and the LLM's tools work in).
"""

from __future__ import annotations

import os
import secrets
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
