"""How the session's nodes speak: events on langgraph's custom stream, which the driver
renders as they come (so a long command shows its progress while it runs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.config import get_stream_writer

MAX_ROWS = 40


def emit(kind: str, text: str = "", **more: Any) -> None:
    """Send one event to whoever drives the session (a terminal, a test)."""
    get_stream_writer()({"kind": kind, "text": text, **more})


def progress() -> Callable[[str], None]:
    """A progress reporter bound to this node's stream: safe to call from other threads
    (the sandbox's step watcher) and from inside the inner migration graph."""
    write = get_stream_writer()
    return lambda message: write({"kind": "progress", "text": message})


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    shown = rows[:MAX_ROWS]
    emit("table", title=title, columns=columns, rows=[[str(c) for c in r] for r in shown])
    if len(rows) > MAX_ROWS:
        emit("text", f"... and {len(rows) - MAX_ROWS} more")
