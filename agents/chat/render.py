"""How a chat session's output reaches the person: rich on a terminal, plain text otherwise.

The session graph emits small events (text, diff, table, progress, error); the
renderer is the only place that knows about terminals, so piping a session to a
file or a CI log gives plain, greppable lines with no escape codes.
"""

from __future__ import annotations

import sys
from typing import IO, Any


class PlainRenderer:
    """One line per progress message; diffs and tables as plain text."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def show(self, event: dict[str, Any]) -> None:
        kind = event.get("kind", "text")
        if kind == "table":
            self._table(event)
        elif kind == "progress":
            self._write(f"... {event['text']}")
        elif kind == "error":
            self._write(f"error: {event['text']}")
        else:
            self._write(str(event.get("text", "")).rstrip("\n"))

    def progress_done(self) -> None:
        """Nothing to clear: progress lines stay in the log."""

    def ask(self, prompt: str) -> str:
        self.stream.flush()
        return input(prompt)

    def _table(self, event: dict[str, Any]) -> None:
        rows = [event["columns"], *event["rows"]]
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(event["columns"]))]
        if event.get("title"):
            self._write(event["title"])
        for row in rows:
            cells = [str(cell).ljust(widths[i]) for i, cell in enumerate(row)]
            self._write("  ".join(cells).rstrip())

    def _write(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RichRenderer:
    """Highlighted diffs, boxed tables and a live status line for long work."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(highlight=False)
        self._status: Any = None

    def show(self, event: dict[str, Any]) -> None:
        from rich.syntax import Syntax
        from rich.table import Table

        kind = event.get("kind", "text")
        if kind == "progress":
            if self._status is None:
                self._status = self.console.status(event["text"])
                self._status.start()
            else:
                self._status.update(event["text"])
            self.console.print(f"[dim]... {event['text']}[/dim]", markup=True)
            return
        self.progress_done()
        if kind == "diff":
            self.console.print(Syntax(event["text"], "diff", theme="ansi_dark", word_wrap=True))
        elif kind == "table":
            table = Table(title=event.get("title"), title_justify="left")
            for column in event["columns"]:
                table.add_column(str(column))
            for row in event["rows"]:
                table.add_row(*(str(cell) for cell in row))
            self.console.print(table)
        elif kind == "error":
            self.console.print(f"error: {event['text']}", style="bold red", markup=False)
        else:
            self.console.print(str(event.get("text", "")).rstrip("\n"), markup=False)

    def progress_done(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def ask(self, prompt: str) -> str:
        self.progress_done()
        return self.console.input(prompt, markup=False, emoji=False)


def renderer_for(stream: IO[str] | None = None, plain: bool = False) -> Any:
    """Rich when standard output is a terminal (and not ``--plain``), plain text otherwise."""
    stream = stream or sys.stdout
    if not plain and stream.isatty():
        return RichRenderer()
    return PlainRenderer(stream)
