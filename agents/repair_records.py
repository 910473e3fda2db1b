"""The JSON shapes of the rewrite work: the plan's items, repair requests and their records.

The planner sorts findings into ``PlanItem``s; the rewriter and the kernel lane turn
them into ``RepairRequestRecord``s (``llm.repair.RepairRequest``'s fields, as checkpoints
carry them in ``NextFix.request``); each repair leaves a ``RepairRecord`` in the round's
decisions. Plain dicts at run time: the TypedDicts only name their keys.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

# An edit beyond the codemods (``llm.toolbox.EditRecord.to_json``), with who made it and
# for what (``for`` is a keyword, hence the functional form).
AgentEdit = TypedDict(
    "AgentEdit",
    {
        "path": str,
        "start_line": int,
        "end_line": int,
        "before": str,
        "after": str,
        "reason": str,
        "tool": str,
        "by": str,  # llm
        "for": str,  # the construct or failure the model was asked about
    },
    total=False,
)


class PlanItem(TypedDict, total=False):
    """A finding the codemods do not fix, for the model or a person (``Plan.llm/manual``)."""

    rule: str
    path: str
    line: int
    end_line: int
    message: str
    category: str
    hint: str


class RepairRequestRecord(TypedDict):
    """A repair request (``llm.repair.RepairRequest``'s fields): ``kind`` is construct,
    failure, instruction or kernel."""

    kind: str
    target: str
    path: str
    start_line: int
    end_line: int
    problem: str
    context: NotRequired[str]  # a chat instruction has none


class RepairRecord(TypedDict, total=False):
    """One LLM repair as the round records it (``rewriter.llm_repair``)."""

    request: RepairRequestRecord
    status: str  # edited | no-change | refused | gave-up | error | rejected
    summary: str
    turns: int
    usage: dict[str, float]  # llm.client.Usage.to_json: calls, tokens, retries, seconds
    error: str | None
    edits: list[AgentEdit]  # llm.toolbox.EditRecord's fields
    rejected_edits: list[AgentEdit]
    imports_added: list[str]


class RepairBrief(TypedDict):
    """What the decision log keeps of a repair (``rewrite_round._brief``)."""

    path: str
    lines: list[int]  # the request's first and last line
    summary: str
    turns: int | None
    edits: int
    error: str | None


class CodemodSummary(TypedDict):
    """What the codemods did in a round (``rewriter.codemods``), for the decision log."""

    edits: int
    files: list[str]
    converted: int
    left_for_humans: int
    advisories: int
