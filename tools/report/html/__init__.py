"""``torchport-report/index.html``: the whole report as one self-contained page.

One file a person opens from disk (``file://``), with no network: inline CSS, the plots as
``data:`` URIs, the documentation of every rule it cites embedded, no script, and a
Content-Security-Policy that lets the page fetch nothing (``default-src 'none'``), so a
page that would try is refused by the browser, not trusted to behave.

Everything quoted from the repository (file names, code, the program's error messages) is
escaped text: Markdown from the other report writers is rendered with raw HTML off
(``safe_markdown``), the code is escaped token by token (``code``), and no attribute holds
the repository's words. The page is built from the data the Markdown and JSON reports are
written from (``page.ReportPage``), never from re-reading those files.
"""

from __future__ import annotations

from .batch_index import batch_index
from .page import Note, ReportPage, Section, render_page

PAGE = "index.html"

__all__ = ["PAGE", "Note", "ReportPage", "Section", "batch_index", "render_page"]
