"""Findings a repository has accepted: a baseline file, so that a pre-commit hook or a CI
job fails on new CUDA constructs only, not on the ones the code had when it adopted
torchport.

A finding is matched by its rule, its file and its line's text with whitespace collapsed
(``fingerprint``), never by its line number: an edit elsewhere in the file that shifts
lines leaves old findings old. The same construct twice in one file is two findings; a
third copy is new. ``torchport scan --write-baseline FILE`` writes one, and a JSON report
(``torchport scan -f json -o FILE``) reads as one too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..sandbox.safepath import read_regular
from .findings import Finding, ScanResult

FORMAT = "torchport-baseline"
VERSION = 1
MAX_BYTES = 64 << 20  # a baseline of a very large repository, not an arbitrary file

Key = tuple[str, str, str]


class BaselineError(ValueError):
    """A baseline file that cannot be read (the message says which and why)."""


def fingerprint(snippet: str) -> str:
    """The line's text with runs of whitespace made one space: what survives re-indenting."""
    return " ".join(snippet.split())


def key_of(finding: Finding | Mapping[str, Any]) -> Key:
    data = finding.to_json() if isinstance(finding, Finding) else finding
    return (str(data["rule"]), str(data["path"]), fingerprint(str(data.get("snippet", ""))))


def render_baseline(result: ScanResult) -> str:
    """The baseline of a scan: one entry per finding, sorted, without line numbers' churn
    beyond the ``line`` kept for people reading it."""
    entries = sorted(
        (
            {"rule": f.rule, "path": f.path, "line": f.line, "snippet": fingerprint(f.snippet)}
            for f in result.findings
        ),
        key=lambda e: (e["path"], e["rule"], e["snippet"], e["line"]),
    )
    data = {"format": FORMAT, "version": VERSION, "target": result.target, "findings": entries}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def read_baseline(path: Path) -> Counter[Key]:
    """How many findings of each (rule, file, fingerprint) the baseline accepts.

    ``path`` is read as the user named it (a link is followed) but only when it is a
    regular file of at most MAX_BYTES: not ``/dev/zero``, a FIFO or a device. One named
    by a repository's own configuration is confined to the repository before it gets
    here (``agents.project_config``)."""
    try:
        data = json.loads(read_regular(path.resolve(), MAX_BYTES).decode("utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(f"baseline {path} is not JSON: {exc}") from None
    findings = data.get("findings") if isinstance(data, dict) else None
    if not isinstance(findings, list) or not all(_entry(f) for f in findings):
        raise BaselineError(
            f"baseline {path} has no list of findings with rule, path and snippet "
            "(write one with `torchport scan --write-baseline FILE`)"
        )
    return Counter(key_of(f) for f in findings)


def _entry(item: Any) -> bool:
    return isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("rule", "path"))


def new_findings(findings: Iterable[Finding], accepted: Counter[Key]) -> list[Finding]:
    """The findings the baseline does not account for, in their order; where a file has
    more copies of a construct than the baseline, the later ones are the new ones."""
    left = Counter(accepted)
    new = []
    for finding in findings:
        key = key_of(finding)
        if left[key] > 0:
            left[key] -= 1
        else:
            new.append(finding)
    return new
