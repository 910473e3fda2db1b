"""``--annotate``: a ``# torchport: CODE ...`` comment above each construct left for a human.

Line-based on purpose: comments are the one thing an AST rewrite would have to
fight for, and a comment line above a statement changes nothing else. Running
it twice adds nothing the second time.
"""

from __future__ import annotations

import ast

from torchport.sandbox import astparse

from ..findings import Finding


def comment_for(finding: Finding, target: str | None = None) -> str:
    fix = finding.fix.get(target) if target else None
    hint = f" -> {fix['hint']}" if fix and fix.get("hint") else ""
    return f"# torchport: {finding.rule} {finding.message}{hint}"


def _statement_starts(tree: ast.Module) -> dict[int, int]:
    """Each line of a simple statement, or of a compound statement's header, -> its first line."""
    starts: dict[int, int] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        end = (body[0].lineno - 1) if isinstance(body, list) and body else node.end_lineno
        for line in range(node.lineno, (end or node.lineno) + 1):
            starts[line] = max(starts.get(line, 0), node.lineno)
    return starts


def annotate_python(source: str, findings: list[Finding], target: str | None = None) -> str:
    if not findings:
        return source
    try:
        starts = _statement_starts(astparse.parse(source))
    except SyntaxError:
        return source
    lines = source.splitlines(keepends=True)
    inserts: dict[int, list[str]] = {}
    for f in sorted(findings, key=lambda f: (f.line, f.col, f.rule)):
        start = starts.get(f.line)
        if start is None:
            continue
        text = lines[start - 1]
        indent = text[: len(text) - len(text.lstrip())]
        comment = f"{indent}{comment_for(f, target)}\n"
        above = lines[start - 2] if start >= 2 else ""
        block = inserts.setdefault(start, [])
        if comment not in block and above.strip() != comment.strip():
            block.append(comment)
    for start in sorted(inserts, reverse=True):
        lines[start - 1 : start - 1] = inserts[start]
    return "".join(lines)
