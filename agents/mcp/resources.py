"""The server's resources: one document per rule code, and the last report.

``torchport://rules/CODE`` is the rule's documentation (what ``torchport rules CODE``
prints: what, why, example, fix safety) with its fix for each target, as Markdown.
``torchport://report/last`` is what the last ``migrate`` or ``verify`` of this server
found, as JSON (nothing before the first).
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources import FunctionResource, TextResource
from torchport.tools.catalogue import Rule, load_catalogue

from .session import Session

RULE_URI = "torchport://rules/{code}"
LAST_REPORT_URI = "torchport://report/last"


def rule_summary(rule: Rule) -> dict[str, Any]:
    """What ``explain_rule`` answers: the rule's fields and fixes (as ``torchport rules
    CODE --format json``), its documentation as the rule's resource has it."""
    return {**rule.to_json(), "doc": rule_doc(rule)}


def rule_doc(rule: Rule) -> str:
    """The rule's documentation, then how each target fixes it."""
    head = rule.doc.rstrip() if rule.doc else f"# {rule.code} {rule.name}\n\n{rule.title}"
    rows = [f"- **{target}** ({fix.kind.value}): {fix.hint}" for target, fix in rule.fixes.items()]
    return head + "\n\n## Fix per target\n\n" + "\n".join(rows) + "\n"


def register(server: MCPServer, session: Session) -> None:
    for rule in load_catalogue():
        server.add_resource(
            TextResource(
                text=rule_doc(rule),
                uri=RULE_URI.format(code=rule.code),
                name=rule.code,
                title=f"{rule.code}: {rule.title}",
                description=f"The documentation of rule {rule.code} ({rule.name}).",
                mime_type="text/markdown",
            )
        )

    def last_report() -> str:
        empty = {"report": None, "note": "no migrate or verify has run in this server yet"}
        return json.dumps(session.last_report or empty, indent=2, default=str)

    server.add_resource(
        FunctionResource.from_function(
            last_report,
            uri=LAST_REPORT_URI,
            name="last-report",
            title="The last report",
            description="What the last migrate or verify of this server found: the proposal's "
            "changes, or the verdict and its evidence.",
            mime_type="application/json",
        )
    )
