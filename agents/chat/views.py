"""The commands that show the session and change neither it nor the repository: /scan
/plan /diff /explain /report (which also saves the proposal as a patch and as an HTML
report in the session's folder) /help /quit."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from torchport.tools.catalogue import load_catalogue
from torchport.tools.catalogue.doc_sections import target_notes
from torchport.tools.findings import is_advisory, work_line
from torchport.tools.report.hunks import Change
from torchport.tools.report.linemap import line_map
from torchport.tools.safetext import terminal_line
from torchport.tools.scanner import scan

from .. import config_record
from ..planner import make_plan, work_of
from ..repair_records import PlanItem
from ..state import PlanRecord
from . import changes as ch
from . import html_report
from .events import emit, table
from .slash_commands import help_rows, hidden
from .state import ChatRuntime, ChatState, digest, overlay_of, scan_options


def scan_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    found = scan(Path(state["source"]), scan_options(state)).findings
    rows = [
        [f.rule, f"{f.path}:{f.line}", f.fix[state["target"]]["kind"], f.message] for f in found
    ]
    table(f"{len(found)} constructs for {state['target']}", ["rule", "where", "fix", ""], rows)
    return {}


def plan_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    p = plan_of(state)
    command = p.get("entry")
    entry = " ".join(command) if command else f"not runnable: {p.get('not_runnable')}"
    emit("text", f"run as: {entry} ({p.get('entry_reason', '')})")
    emit("text", work_line(work_of(p)))
    rows = _item_rows([*p["llm"], *p["manual"]])
    if rows:
        table("not automatic", ["rule", "where", "what to do"], rows)
    return {"plan": p}


def plan_of(state: ChatState) -> PlanRecord:
    """The plan for the session's target, with its entry command (--entry, /verify CMD)."""
    source = Path(state["source"])
    found = scan(source, scan_options(state))
    said = config_record.entry_reason(state.get("budget") or {})
    return make_plan(source, found, state["target"], state.get("entry"), said).to_json()


def diff_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    changes = state.get("changes") or []
    if not changes:
        emit("text", "Nothing proposed yet: /migrate first.")
        return {}
    path = state["command"].get("arg") or None
    if path and path not in (state.get("proposal") or {}):
        changed = file_list(state["proposal"])
        emit("error", f"no proposed change in {terminal_line(path)}; changed: {changed}")
        return {}
    undone = set(state.get("undone") or [])
    for c in changes:
        if path and c["path"] != path:
            continue
        status = " (undone)" if c["id"] in undone else ""
        emit("text", f"[{c['id']}] {where(c)} {made_by(c)}{status}")
        if not status:
            emit("diff", ch.hunk(state["base"], state["proposal"], c))
    return {}


def explain(state: ChatState, chat: ChatRuntime) -> ChatState:
    arg = state["command"].get("arg", "").strip()
    rule = load_catalogue().get(arg.upper()) if arg else None
    if rule is not None:
        fix = rule.fixes.get(state["target"])
        emit("text", f"{rule.code} {rule.title}: {rule.message}")
        if fix is not None:
            emit("text", f"for {state['target']}: {fix.kind} — {fix.hint}")
        if rule.doc:
            emit("text", rule.doc.strip())
        return {}
    change = _find_change(state, arg)
    if change is None and _explain_left(state, arg):
        return {}
    if change is None:
        emit(
            "error",
            "explain what? /explain TPD001, /explain 3 or /explain train.py:40 (a proposed "
            "change there, or a construct left for you: /plan lists them)",
        )
        return {}
    emit("text", f"[{change['id']}] {where(change)} {made_by(change)}")
    emit("diff", ch.hunk(state["base"], state["proposal"], change))
    catalogue = load_catalogue()
    for code in change.get("rules") or []:
        r = catalogue.get(code)
        if r is not None:
            emit("text", f"{r.code}: {r.title} (/explain {r.code} for the rule's doc)")
    for reason in dict.fromkeys(change.get("reasons") or []):
        emit("text", f"why: {reason}")
    if change["by"] == "supporting":
        emit("text", "why: an import added or dropped because of the other changes here")
    return {}


def report(state: ChatState, chat: ChatRuntime) -> ChatState:
    changes = state.get("changes") or []
    undone = state.get("undone") or []
    overlay = overlay_of(state)
    v = state.get("verification") or {}
    fresh = state.get("verified") == digest(overlay) and v
    usage = state.get("llm_usage") or {}
    rows: list[list[Any]] = [
        ["repository", state["source"]],
        ["target", state["target"]],
        ["changes", f"{len(changes) - len(undone)} proposed, {len(undone)} undone"],
        ["files", file_list(overlay) or "-"],
        ["verification", v.get("verdict", "-") + ("" if fresh or not v else " (stale)")],
        ["applied", "; ".join(file_list(a["files"]) for a in state.get("applied") or [])],
        ["LLM tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)],
    ]
    table(f"session {state['session_id']}", ["", ""], rows)
    manual = (state.get("plan") or {}).get("manual") or []
    left, advisories = left_for_you(manual, state.get("base") or {}, overlay)
    for title, rows in (("left for you", left), ("performance advisories", advisories)):
        if rows:
            table(title, ["rule", "where", "what to do"], rows)
    if overlay:
        path = chat.scratch / "proposal.patch"
        # the files' own bytes, as in migrate's changes.patch
        path.write_text(ch.diff(state["base"], overlay), "utf-8", "surrogateescape")
        emit("text", f"the proposal as a patch: {path}")
    page = html_report.session_page(state, overlay, manual, bool(fresh))
    emit("text", f"the report as a page: {html_report.write_page(chat.scratch, page)}")
    return {}


def help_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    if state["command"].get("error"):
        emit("error", state["command"]["error"])
    has_llm = chat.has_llm(state.get("llm", "none"))
    table("commands", ["command", "what it does"], help_rows(hidden(has_llm)))
    emit(
        "text",
        "Plain language works too: the LLM turns it into a command."
        if has_llm
        else "With an LLM (start with --llm local or --llm URL), plain language works too, "
        "and /edit and /fix let it change the code.",
    )
    emit("text", "Ctrl-L clears the screen; Ctrl-D (or /quit) leaves, the session saved.")
    return {}


def quit_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    emit("text", f"Session saved. Resume with: torchport chat --resume {state['session_id']}")
    return {}


def where(change: Change) -> str:
    """FILE:LINE of a change; one line however the file is named (a name may hold a
    newline, which would otherwise forge a line of the session's output)."""
    return f"{terminal_line(change['path'])}:{change['span'][0] + 1}"


def file_list(paths: Iterable[str]) -> str:
    """Repository file names, sorted, on one line (see ``where``)."""
    return ", ".join(terminal_line(p) for p in sorted(paths))


def made_by(change: Change) -> str:
    rules = ", ".join(change.get("rules") or [])
    return f"{change['by']} {rules}".strip()


def list_changes(changes: list[Change], undone: set[int]) -> None:
    rows = [[c["id"], where(c), made_by(c), "undone" if c["id"] in undone else ""] for c in changes]
    if rows:
        title = "changes (/diff to see them, /undo N to take one back)"
        table(title, ["#", "where", "by", ""], rows)


def _item_rows(items: list[PlanItem]) -> list[list[Any]]:
    return [[m.get("rule"), f"{m.get('path')}:{m.get('line')}", m.get("hint", "")] for m in items]


def left_for_you(
    items: list[PlanItem], base: dict[str, str], overlay: dict[str, str]
) -> tuple[list[list[Any]], list[list[Any]]]:
    """/report's rows: what is left for a human, then the performance advisories (as
    manual.md: ``ADVISORY_CATEGORY``), each at its line in the proposed file with the
    original's beside it; one row per rule and line (``x2`` for two on one line)."""
    maps = {rel: line_map(base[rel], overlay[rel]) for rel in overlay if rel in base}
    grouped: dict[tuple, list[PlanItem]] = {}
    for m in items:
        grouped.setdefault((m.get("path"), m.get("line"), m.get("rule")), []).append(m)
    left: list[list[Any]] = []
    advisories: list[list[Any]] = []
    for (path, line, rule), same in grouped.items():
        where = f"{terminal_line(str(path))}:{line}"
        if path in maps and isinstance(line, int) and maps[path](line) != line:
            where = f"{terminal_line(path)}:{maps[path](line)} (original {line})"
        times = f" x{len(same)}" if len(same) > 1 else ""
        bucket = advisories if is_advisory(same[0].get("category")) else left
        bucket.append([f"{rule}{times}", where, same[0].get("hint", "")])
    return left, advisories


def _explain_left(state: ChatState, arg: str) -> bool:
    """``/explain FILE:LINE`` where the plan leaves a construct for a human: the rule, why it
    breaks on the target and why torchport does not fix it there (lines as on disk)."""
    path, _, line = arg.rpartition(":")
    if not (path and line.isdigit()):
        return False
    p = state.get("plan") or plan_of(state)
    wanted = (path.removeprefix("./"), int(line))
    items = [
        m for m in [*p.get("manual", []), *p.get("llm", [])] if (m["path"], m["line"]) == wanted
    ]
    target, catalogue = state["target"], load_catalogue()
    for m in items:
        rule = catalogue.get(m["rule"])
        fix = rule.fixes.get(target) if rule else None
        kind = fix.kind.value if fix else "manual"
        title = f"{rule.title}: " if rule else ""
        emit("text", f"{where_item(m)} {m['rule']} — left for you ({kind} for {target})")
        emit("text", f"{title}{m.get('message', '')}")
        notes = target_notes(rule.doc, target) if rule and rule.doc else {}
        for section, text in notes.items():
            emit("text", f"{section} on {target}: {text}")
        if kind != "manual":  # the rule's codemod declined this one
            emit("text", f"why it is left here: {m.get('hint') or 'the automatic fix declined it'}")
        elif m.get("hint"):
            emit("text", f"what to do: {m['hint']}")
        emit("text", f"(/explain {m['rule']} for the rule's whole doc)")
    return bool(items)


def where_item(item: PlanItem) -> str:
    """FILE:LINE of a plan item, on one line (see ``where``)."""
    return f"{terminal_line(str(item.get('path')))}:{item.get('line')}"


def _find_change(state: ChatState, arg: str) -> Change | None:
    changes = state.get("changes") or []
    if arg.isdigit():
        return next((c for c in changes if c["id"] == int(arg)), None)
    path, _, line = arg.rpartition(":")
    if line.isdigit():
        return ch.at_line(changes, path or None, int(line))
    return None


LOSS_COLUMNS = ["step", "original (shim)", "migrated (emulated)"]


def loss_table(per_step: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """/verify's losses table: a row per step, and per rank where the runs had several
    (``verifier.compare_ranks`` compares rank i with rank i): without the rank column two
    ranks' step 1 read as one step shown twice."""
    ranked = len({s.get("rank") for s in per_step}) > 1
    rows = [
        [*([s["rank"]] if ranked else []), s["step"], f"{s['reference']:.6g}", f"{s['target']:.6g}"]
        for s in per_step
    ]
    return (["rank", *LOSS_COLUMNS] if ranked else list(LOSS_COLUMNS)), rows
