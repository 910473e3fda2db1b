"""How a chat session's output reaches the person: rich on a terminal, plain text otherwise.

The session graph emits small events (text, diff, table, progress, error); the
renderer is the only place that knows about terminals, so piping a session to a
file or a CI log gives plain, greppable lines with no escape codes. Events quote the
repository (file names, code, the program's errors, the LLM's words), so both renderers
show every event through ``tools.safetext``: blocks keep their lines, single fields
(table cells, titles, progress) are one line each, and rich reads none of it as markup.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from torchport.tools.safetext import terminal_line, terminal_text


def shown_columns(event: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """A table's columns and rows without the columns that are empty in every row (the
    "undone" column of a list where nothing is undone): an empty column is noise."""
    columns, rows = list(event["columns"]), [[str(c) for c in r] for r in event["rows"]]
    keep = [i for i in range(len(columns)) if not rows or any(r[i].strip() for r in rows)]
    return [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]


class PlainRenderer:
    """One line per progress message; diffs and tables as plain text."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def show(self, event: dict[str, Any]) -> None:
        kind = event.get("kind", "text")
        if kind == "table":
            self._table(event)
        elif kind == "progress":
            self._write(f"... {terminal_line(event['text'])}")
        elif kind == "error":
            self._write(f"error: {terminal_text(event['text'])}")
        else:
            self._write(terminal_text(event.get("text", "")).rstrip("\n"))

    def progress_done(self) -> None:
        """Nothing to clear: progress lines stay in the log."""

    def ask(self, prompt: str) -> str:
        self.stream.flush()
        return input(terminal_text(prompt))

    def _table(self, event: dict[str, Any]) -> None:
        columns, cells = shown_columns(event)
        rows = [[terminal_line(c) for c in row] for row in [columns, *cells]]
        widths = [max(len(r[i]) for r in rows) for i in range(len(columns))]
        if event.get("title"):
            self._write(terminal_line(event["title"]))
        if not any(columns):  # a table of names and values: no header line
            rows = rows[1:]
        for row in rows:
            padded = [cell.ljust(widths[i]) for i, cell in enumerate(row)]
            self._write("  ".join(padded).rstrip())

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
        from rich.text import Text

        kind = event.get("kind", "text")
        if kind == "progress":
            line = terminal_line(event["text"])
            if self._status is None:
                self._status = self.console.status(Text(line))
                self._status.start()
            else:
                self._status.update(Text(line))
            self.console.print(Text(f"... {line}", style="dim"))
            return
        self.progress_done()
        if kind == "diff":
            diff = terminal_text(event["text"])
            self.console.print(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))
        elif kind == "table":
            title = Text(terminal_line(event["title"])) if event.get("title") else None
            columns, rows = shown_columns(event)
            table = Table(title=title, title_justify="left", show_header=any(columns))
            for column in columns:
                table.add_column(Text(terminal_line(column)))
            for row in rows:
                table.add_row(*(Text(terminal_line(cell)) for cell in row))
            self.console.print(table)
        elif kind == "error":
            self.console.print(Text(f"error: {terminal_text(event['text'])}", style="bold red"))
        else:
            self.console.print(Text(terminal_text(event.get("text", "")).rstrip("\n")))

    def progress_done(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def ask(self, prompt: str) -> str:
        """The line editor gets the prompt itself (rich's ``input`` prints it first), so
        that its Ctrl-L clears the screen and shows the prompt again."""
        self.progress_done()
        self.console.file.flush()
        return input(terminal_text(prompt))


def renderer_for(stream: IO[str] | None = None, plain: bool = False) -> Any:
    """Rich when standard output is a terminal (and not ``--plain``), plain text otherwise."""
    stream = stream or sys.stdout
    if not plain and stream.isatty():
        return RichRenderer()
    return PlainRenderer(stream)
