"""How far a batch is, on standard error: a live bar on a terminal, plain lines otherwise.

Plain lines (one per finished repository) are what a CI log or ``nohup`` file
can keep; a bar there would be thousands of carriage returns. Names, verdicts and
messages pass through ``terminal_line`` and the bar's text column reads no rich markup,
so nothing a repository or its list chose can move the cursor, retitle the terminal or
become a rich ``[link=...]``.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from torchport.tools.safetext import terminal_line

from .job import JobRecord


class Progress:
    """Use as a context manager; ``finished(record)`` after each repository."""

    def __init__(self, total: int, done: int, quiet: bool = False, stream: TextIO | None = None):
        self.total, self.done = total, done
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.quiet or not self.stream.isatty():
            return self
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("migrating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}", markup=False),
            console=Console(file=self.stream),
        )
        self._bar.__enter__()
        self._task = self._bar.add_task("batch", total=self.total, completed=self.done, last="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def finished(self, record: JobRecord) -> None:
        self.done += 1
        what = terminal_line(f"{record['name']}: {record['verdict']}")
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, last=what)
        elif not self.quiet:
            line = f"torchport: [{self.done}/{self.total}] {what} ({record.get('time_s', 0):.1f} s)"
            print(line, file=self.stream, flush=True)

    def say(self, message: str) -> None:
        """A line that is not progress (start, summary); printed above a live bar."""
        if self.quiet:
            return
        message = terminal_line(message)
        if self._bar is not None:
            self._bar.console.print(f"torchport: {message}", markup=False, highlight=False)
        else:
            print(f"torchport: {message}", file=self.stream, flush=True)
