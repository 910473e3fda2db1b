"""Edit precision and recall against a golden migration, at the level of statements.

A migration is scored by what it changed, not by how it printed it: each Python
file becomes the sequence of its statements, normalised by ``ast.unparse``
(compound statements by their header alone), so formatting, comments and quote
style do not count. The edits of a migration are the statements removed from
and added to the original (a multiset diff); precision is the share of a
candidate's edits the golden also makes, recall the share of the golden's edits
the candidate makes. Notebooks are scored on their code cells; other text files
on their stripped, non-blank lines.
"""

from __future__ import annotations

import ast
import copy
import difflib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from torchport.sandbox import astparse

_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")
# Files a migration may touch that are not code run by the program.
IGNORED_PARTS = {"torchport-report", "__pycache__", ".git"}


def _header(node: ast.stmt) -> str:
    shallow = copy.copy(node)
    for name in _BODIES:
        if hasattr(shallow, name):
            setattr(shallow, name, [])
    if hasattr(shallow, "body"):
        shallow.body = [ast.Pass()]
    try:
        return ast.unparse(shallow).splitlines()[0]
    except Exception:  # an odd node: fall back to its type
        return type(node).__name__


def _statements(nodes: list[ast.stmt]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if any(getattr(node, name, None) for name in _BODIES):
            out.append(_header(node))
            for name in _BODIES:
                children = getattr(node, name, None) or []
                for child in children:
                    if isinstance(child, ast.stmt):
                        out += _statements([child])
                    else:  # except handlers, match cases
                        out.append(type(child).__name__)
                        out += _statements(getattr(child, "body", []))
        else:
            out.append(ast.unparse(node))
    return out


def units(path: str, text: str) -> list[str]:
    """The comparable units of one file's text."""
    if path.endswith(".ipynb"):
        try:
            cells = json.loads(text).get("cells", [])
        except ValueError:
            return text.split("\n")
        code = "\n".join(
            "".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code"
        )
        lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith(("!", "%"))]
        return units("cells.py", "\n".join(lines))
    if path.endswith(".py"):
        try:
            return _statements(astparse.parse(text).body)
        except SyntaxError:
            return ["<does not parse>", *text.splitlines()]
    return [line.strip() for line in text.splitlines() if line.strip()]


def edits_of(path: str, before: str, after: str) -> Counter[tuple[str, str, str]]:
    """(path, '-' or '+', unit) for every unit removed or added."""
    old, new = units(path, before), units(path, after)
    found: Counter[tuple[str, str, str]] = Counter()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        found.update((path, "-", u) for u in old[i1:i2])
        found.update((path, "+", u) for u in new[j1:j2])
    return found


def tree_edits(original: Path, migrated: Path) -> Counter[tuple[str, str, str]]:
    """Edits of a whole migrated tree against the original (text files only)."""
    found: Counter[tuple[str, str, str]] = Counter()
    for path in sorted(p for p in migrated.rglob("*") if p.is_file()):
        rel = path.relative_to(migrated)
        if IGNORED_PARTS.intersection(rel.parts):
            continue
        before_path = original / rel
        try:
            after = path.read_text(encoding="utf-8")
            before = before_path.read_text(encoding="utf-8") if before_path.is_file() else ""
        except (OSError, UnicodeDecodeError):
            continue  # binary files are not scored
        if before != after:
            found += edits_of(str(rel), before, after)
    return found


def golden_tree_edits(original: Path, golden: Path) -> Counter[tuple[str, str, str]]:
    """A golden folder holds only the files that change."""
    found: Counter[tuple[str, str, str]] = Counter()
    for path in sorted(p for p in golden.rglob("*") if p.is_file() and p.name != ".keep"):
        rel = path.relative_to(golden)
        before_path = original / rel
        before = before_path.read_text(encoding="utf-8") if before_path.is_file() else ""
        found += edits_of(str(rel), before, path.read_text(encoding="utf-8"))
    return found


@dataclass(frozen=True)
class EditScore:
    precision: float
    recall: float
    candidate: int  # edits the migration made
    golden: int  # edits the golden makes
    matched: int
    files_touched: int
    outside_golden: tuple[str, ...]  # files changed that the golden leaves alone


def score(
    candidate: Counter[tuple[str, str, str]], golden: Counter[tuple[str, str, str]]
) -> EditScore:
    matched = sum((candidate & golden).values())
    n_cand, n_gold = sum(candidate.values()), sum(golden.values())
    files = {path for path, _, _ in candidate}
    return EditScore(
        precision=1.0 if n_cand == 0 else matched / n_cand,
        recall=1.0 if n_gold == 0 else matched / n_gold,
        candidate=n_cand,
        golden=n_gold,
        matched=matched,
        files_touched=len(files),
        outside_golden=tuple(sorted(files - {path for path, _, _ in golden})),
    )
