"""The machine-readable scan report: every field a later stage (planner, eval) reads."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from .. import __version__
from ..filenames import printable_data
from ..findings import ScanResult
from .summary import summarize


def scan_to_dict(result: ScanResult) -> dict[str, Any]:
    return {
        "tool": {"name": "torchport", "version": __version__},
        "root": result.root,
        "target": result.target,
        "files_scanned": result.files_scanned,
        "loc": result.loc,
        "findings": [f.to_json() for f in result.findings],
        "entrypoints": [asdict(e) for e in result.entrypoints],
        "dependencies": [asdict(d) for d in result.dependencies],
        "skipped": [asdict(s) for s in result.skipped],
        "summary": summarize(result),
    }


def render_json(result: ScanResult) -> str:
    """Valid JSON for any reader: names that are not UTF-8 as ``tools.filenames`` says."""
    return json.dumps(printable_data(scan_to_dict(result)), indent=2) + "\n"
