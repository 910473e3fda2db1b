"""Report writers for scan results: text, JSON, SARIF 2.1.0 and Markdown."""

from __future__ import annotations

from collections.abc import Callable

from ..findings import ScanResult
from .json_report import render_json
from .markdown import render_markdown
from .sarif import render_sarif
from .text import render_text

FORMATS: dict[str, Callable[[ScanResult], str]] = {
    "text": render_text,
    "json": render_json,
    "sarif": render_sarif,
    "markdown": render_markdown,
}

__all__ = ["FORMATS", "render_json", "render_markdown", "render_sarif", "render_text"]
