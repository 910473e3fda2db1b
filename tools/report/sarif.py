"""SARIF 2.1.0, the format GitHub code scanning and most IDEs ingest.

Paths are relative to ``%SRCROOT%`` so that a report is portable between a CI
checkout and a developer's clone; each is percent-encoded (RFC 3986, from the raw
bytes of the name), so a file named ``a b#c?.py`` or ``x:y.py`` is one valid relative
reference that decodes back to that file, never a query, fragment or scheme. Files that
could not be scanned are reported as tool-execution notifications, not as results.
"""

from __future__ import annotations

import json
from typing import Any

from .. import __version__
from ..catalogue import Rule, load_catalogue
from ..findings import ScanResult
from ..safetext import file_uri, uri_path

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
INFO_URI = "https://github.com/torchport/torchport"


def _rule_descriptor(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.title.replace("`", "")},
        "fullDescription": {"text": rule.message},
        "help": {"text": rule.doc or rule.message, "markdown": rule.doc or rule.message},
        "defaultConfiguration": {"level": LEVELS[rule.severity.value]},
        "properties": {
            "category": rule.category,
            "tags": ["cuda", rule.category],
            "fix": {t: f.to_json() for t, f in rule.fixes.items()},
        },
    }


def _artifact(path: str) -> dict[str, str]:
    return {"uri": uri_path(path), "uriBaseId": "SRCROOT"}


def render_sarif(result: ScanResult) -> str:
    catalogue = load_catalogue()
    used = sorted({f.rule for f in result.findings})
    index = {code: i for i, code in enumerate(used)}
    results = []
    for f in result.findings:
        region: dict[str, Any] = {
            "startLine": f.line,
            "startColumn": f.col,
            "endLine": f.end_line,
            "endColumn": max(f.end_col, 1),
        }
        if f.snippet:
            region["snippet"] = {"text": f.snippet}
        entry: dict[str, Any] = {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": LEVELS[f.severity],
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact(f.path),
                        "region": region,
                    }
                }
            ],
            "properties": {"category": f.category, "fix": f.fix},
        }
        if f.cell is not None:
            entry["properties"]["notebookCell"] = f.cell
            entry["locations"][0]["logicalLocations"] = [
                {"name": f"cell {f.cell}", "kind": "module"}
            ]
        results.append(entry)
    notifications = [
        {
            "level": "note",
            "message": {"text": f"skipped: {s.reason}"},
            "locations": [{"physicalLocation": {"artifactLocation": _artifact(s.path)}}],
        }
        for s in result.skipped
    ]
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "torchport",
                        "version": __version__,
                        "informationUri": INFO_URI,
                        "rules": [_rule_descriptor(catalogue.by_code[c]) for c in used],
                    }
                },
                "originalUriBaseIds": {"SRCROOT": {"uri": file_uri(result.root)}},
                "invocations": [
                    {"executionSuccessful": True, "toolExecutionNotifications": notifications}
                ],
                "results": results,
                "properties": {"target": result.target},
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"
