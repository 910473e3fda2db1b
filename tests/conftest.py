from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from torchport.tools.scanner import ScanOptions, scan


@pytest.fixture
def scan_source(tmp_path: Path):
    """Scan one Python file written from a dedented string; return (line, rule) pairs."""

    def run(source: str, name: str = "prog.py", **options) -> list[tuple[int, str]]:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        result = scan(tmp_path, ScanOptions(**options))
        return [(f.line, f.rule) for f in result.findings if f.path == name]

    return run
