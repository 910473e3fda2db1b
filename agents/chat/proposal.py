"""The commands that make, change, check or write the proposal: /migrate /undo /redo
/target /verify /fix /edit /apply. Only ``apply`` writes to the repository, and only
after the person's yes (a langgraph interrupt)."""

from __future__ import annotations

import dataclasses
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.types import interrupt
from torchport.tools.catalogue import TARGETS
from torchport.tools.report.counts import count_constructs
from torchport.tools.report.hunks import Change
from torchport.tools.sourcefile import read_exact

from .. import config_record
from ..defaults import DEFAULTS
from ..repair_records import RepairRecord, RepairRequestRecord
from ..state import scan_filters
from ..verdicts import Verdict
from ..verification_records import VerificationRecord
from ..verify_step import verify_overlay
from . import changes as ch
from . import verify_args
from .events import emit, progress, table
from .state import ChatRuntime, ChatState, digest, overlay_of, run_key
from .views import file_list, list_changes, loss_table, made_by, plan_of, where

YES = ("y", "yes")


def propose(
    source: Path,
    target: str,
    llm: str,
    run_id: str,
    say: Callable[[str], None],
    make_llm: Any,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The migration of ``source`` for ``target`` as a proposal, written nowhere: the
    original text of each changed file (``base``), its proposed text, the changes numbered
    from 1 and what made them. Chat's /migrate and the MCP server's ``migrate`` both call
    it, so the two propose the same thing. ``make_llm``: settings -> client or None;
    ``options``: more of the run's settings (its entry, the files and rules it leaves)."""
    from .. import graph
    from ..deliver import migration_result

    settings = {
        **DEFAULTS,
        "source": str(source),
        "target": target,
        "verify": False,  # verification is its own step in both callers
        "dry_run": True,
        "llm": llm,
        "run_id": run_id,
        **(options or {}),
    }
    inner = graph.Runtime(run_id, say, make_llm)
    # Nothing of this inner run is checkpointed. Without a mode of its own it inherits the
    # session's durability ("sync"), which langgraph 1.2 cannot honour without a
    # checkpointer (AttributeError on its missing save), so it gets one.
    # (langgraph then warns that the mode has no effect: true, and the person need not see it)
    app = graph.build(inner).compile(checkpointer=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`durability` has no effect")
        final = app.invoke({"settings": settings}, durability="async")
    proposal = final.get("overlay") or {}
    base = {rel: _read(source / rel) or "" for rel in proposal}
    result = migration_result(final)
    edits = [dataclasses.asdict(e) for e in result.edits]
    edits += [{**e, "by": "llm"} for e in final.get("agent_edits") or []]
    return {
        "plan": final.get("plan"),
        "base": base,
        "proposal": proposal,
        "changes": ch.split(base, proposal, edits),
        "edits": edits,
        "totals": count_constructs(result).totals(),
        "llm_usage": final.get("llm_usage") or {},
    }


def migrate_node(state: ChatState, chat: ChatRuntime) -> ChatState:
    run_id = f"chat-{state['session_id']}"
    made = propose(
        Path(state["source"]),
        state["target"],
        state.get("llm", "none"),
        run_id,
        progress(),
        lambda s: chat.llm(s["llm"]),
        {
            "entry": state.get("entry"),
            **{k: list(v) for k, v in scan_filters(state.get("budget") or {}).items()},
        },
    )
    proposal, found, totals = made["proposal"], made["changes"], made["totals"]
    by_llm = sum(1 for c in found if c["by"] == "llm")
    emit(
        "text",
        f"proposed {len(found)} changes in {len(proposal)} files "
        f"({by_llm} by the LLM); {totals['left']} constructs left for you and "
        f"{totals['advisory']} performance advisories (/report). Nothing is written until /apply.",
    )
    kept = set(state.get("kept_back") or [])
    undone = [c["id"] for c in found if set(c.get("rules") or []) & kept]
    if undone:
        emit("text", f"left undone as you asked ({', '.join(sorted(kept))}): /redo to add")
    list_changes(found, set(undone))
    return {
        "plan": made["plan"],
        "base": made["base"],
        "proposal": proposal,
        "changes": found,
        "edits": made["edits"],
        "undone": undone,
        "verification": None,
        "verified": None,
        "llm_usage": made["llm_usage"] or state.get("llm_usage") or {},
    }


def undo(state: ChatState, chat: ChatRuntime) -> ChatState:
    return _toggle(state, undo=True)


def redo(state: ChatState, chat: ChatRuntime) -> ChatState:
    return _toggle(state, undo=False)


def target(state: ChatState, chat: ChatRuntime) -> ChatState:
    arg = state["command"].get("arg", "").strip()
    if not arg:
        emit("text", f"target: {state['target']} (choices: {', '.join(TARGETS)})")
        return {}
    if arg not in TARGETS:
        emit("error", f"unknown target {arg!r}; choose from {', '.join(TARGETS)}")
        return {}
    dropped = " The proposal was dropped: /migrate again." if state.get("changes") else ""
    emit("text", f"target is now {arg}.{dropped}")
    return {
        "target": arg,
        "plan": None,
        "base": {},
        "proposal": {},
        "changes": [],
        "undone": [],
        "verification": None,
        "verified": None,
    }


def verify(state: ChatState, chat: ChatRuntime) -> ChatState:
    overlay = overlay_of(state)
    if not state.get("changes"):
        emit("text", "Nothing proposed yet: /migrate first.")
        return {}
    try:
        asked = verify_args.parse(state["command"].get("arg", ""))
    except verify_args.VerifyArgsError as exc:
        emit("error", f"{exc}; usage: {verify_args.USAGE}")
        return {}
    settings = _run_settings(state, asked)
    state = {**state, **settings}
    p = state.get("plan") if asked.entry is verify_args.KEEP and state.get("plan") else None
    p = p or plan_of(state)
    command = p.get("entry")
    if p.get("not_runnable") or not command:
        emit("text", f"not-runnable: {p.get('not_runnable')}")
        return {"plan": p, **settings}
    budget = state.get("budget") or {}
    key = run_key(command, budget)
    emit("text", f"running: {shlex.join(command)} ({budget.get('steps')} steps)")
    outcome = verify_overlay(
        Path(state["source"]),
        overlay,
        p,
        state["target"],
        budget,
        chat.scratch,
        progress(),
        reference=state.get("reference") if state.get("reference_of") == key else None,
    )
    v, reference = outcome.verification, outcome.reference
    record = v.to_json()
    emit("text", f"verdict: {v.verdict} — {v.reason}")
    if outcome.overlay is not None:  # judged with repairs the proposal does not have
        emit("text", "The proposal lacks those repaired lines: /migrate again to have them.")
    if v.verdict == Verdict.FAILED:
        _diagnose(record, state["target"])
    per_step = (record.get("parity") or {}).get("per_step") or []
    if per_step:
        table("losses", *loss_table(per_step))
    return {
        "plan": p,
        "verification": record,
        "verified": digest(overlay) if outcome.overlay is None else None,
        "reference": reference,
        "reference_of": key,
        **settings,
    }


def _run_settings(state: ChatState, asked: verify_args.VerifyArgs) -> ChatState:
    """The entry and budget /verify ARGS asks for, kept for later /verify (said once)."""
    if not asked.budget and asked.entry is verify_args.KEEP:
        return {}
    budget = dict(state.get("budget") or {})
    for name, value in asked.budget.items():  # said as the user's, where it loosens a check
        budget = config_record.given(budget, name, value, f"/verify {verify_args.FLAGS[name]}")
    entry = state.get("entry") if asked.entry is verify_args.KEEP else asked.entry
    if asked.entry is not verify_args.KEEP:
        budget = config_record.given(budget, "entry", entry, "/verify")
        budget.pop("entry")  # the session's entry is the state's, not the budget's
    emit(
        "text",
        f"/verify now runs {entry or 'what the planner chooses (/plan)'} with "
        f"{budget.get('steps')} steps, until /verify ARGS says otherwise.",
    )
    return {"budget": budget, "entry": entry}


def fix(state: ChatState, chat: ChatRuntime) -> ChatState:
    from .. import rewriter
    from ..diagnose import diagnose

    overlay = overlay_of(state)
    v = state.get("verification") or {}
    if v.get("verdict") != Verdict.FAILED or state.get("verified") != digest(overlay):
        emit("text", "Nothing to fix: /fix repairs what /verify found in this proposal.")
        return {}
    client = chat.llm(state.get("llm", "none"))
    if client is None:
        emit("text", "/fix needs an LLM: start the session with --llm local or --llm URL.")
        return {}
    found = diagnose(v.get("failure") or v.get("target") or {}, state["target"]).to_json()
    request = rewriter.failure_request(found, v, state["target"])
    if request is None:
        emit("text", f"{found['signature']} points at no line of the program: nothing to edit.")
        return {}
    emit("progress", f"asking the LLM to repair {request['path']} near line {found['line']}")
    source = Path(state["source"])
    repaired, record = rewriter.llm_repair(
        client, source, overlay, chat.scratch / "llm", request, max_tokens=None
    )
    return _adopt(state, client, overlay, repaired, record, found["signature"])


def edit(state: ChatState, chat: ChatRuntime) -> ChatState:
    from .. import rewriter

    where, _, instruction = state["command"].get("arg", "").strip().partition(" ")
    path, _, lines = where.rpartition(":")
    start, _, end = lines.partition("-")
    if not (path and start.isdigit() and (not end or end.isdigit()) and instruction.strip()):
        emit("error", "usage: /edit FILE:LINE[-END] what to change (lines as on disk)")
        return {}
    source = Path(state["source"])
    if not (source / path).is_file():
        emit("error", f"no file {path} in {source}")
        return {}
    client = chat.llm(state.get("llm", "none"))
    if client is None:
        emit("text", "/edit needs an LLM: start the session with --llm local or --llm URL.")
        return {}
    overlay = overlay_of(state)
    before = _read(source / path) or ""
    after = overlay.get(path, before)
    first = ch.map_line(before, after, int(start))
    last = ch.map_line(before, after, int(end or start))
    request: RepairRequestRecord = {
        "kind": "instruction",
        "target": state["target"],
        "path": path,
        "start_line": first,
        "end_line": max(first, last),
        "problem": instruction.strip(),
    }
    emit("progress", f"asking the LLM to change {path} lines {first}-{max(first, last)}")
    changed, record = rewriter.llm_repair(
        client, source, overlay, chat.scratch / "llm", request, max_tokens=None
    )
    return _adopt(state, client, overlay, changed, record, "your request")


def apply(state: ChatState, chat: ChatRuntime) -> ChatState:
    overlay = overlay_of(state)
    if not overlay:
        emit("text", "Nothing to apply.")
        return {}
    source = Path(state["source"])
    stale = stale_files(source, state["base"], overlay)
    if stale:
        emit("error", f"changed on disk since /migrate: {file_list(stale)}; /migrate again")
        return {}
    v = state.get("verification") or {}
    status = (
        v.get("verdict", Verdict.NOT_VERIFIED)
        if state.get("verified") == digest(overlay)
        else "not verified since the last change"
    )
    active = len(state["changes"]) - len(state.get("undone") or [])
    question = (
        f"Write {active} changes to {len(overlay)} files in {source} "
        f"({file_list(overlay)}); verification: {status}. Apply? [y/N] "
    )
    answer = interrupt({"kind": "confirm", "question": question})
    if str(answer).strip().lower() not in YES:
        emit("text", "Not applied; the proposal is kept.")
        return {}
    applied = list(state.get("applied") or [])
    backup = chat.scratch / f"backup-{len(applied) + 1}"
    written, refused = write_proposal(source, state["base"], overlay, backup)
    for why in refused:
        emit("error", f"not applied: {why}")
    emit("text", f"Applied to {len(written)} files; the originals are in {backup}.")
    applied.append({"files": written, "backup": str(backup), "status": status})
    return {
        "applied": applied,
        "base": {},
        "proposal": {},
        "changes": [],
        "undone": [],
    }


def stale_files(source: Path, base: dict[str, str], overlay: dict[str, str]) -> list[str]:
    """Files of the proposal that changed on disk since it was made (neither the original
    it was made from nor the proposed text): writing them would lose someone's edit."""
    return [rel for rel in overlay if _read(source / rel) not in (base.get(rel), overlay[rel])]


def write_proposal(
    source: Path, base: dict[str, str], overlay: dict[str, str], backup: Path
) -> tuple[list[str], list[str]]:
    """Write ``overlay`` into ``source``: each original first saved under ``backup``, each
    file replaced atomically and never through a symlink. Returns the files written and,
    for those refused, why. Chat's /apply and the MCP server's ``apply`` share it."""
    from torchport.tools.output import nofollow

    written, refused = [], []
    for rel, text in sorted(overlay.items()):
        why = nofollow.symlink_on_path(source, rel)
        if why is not None:
            refused.append(why)
            continue
        saved = backup / rel
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(base[rel].encode("utf-8", "surrogateescape"))
        nofollow.write_text(source, rel, text)
        written.append(rel)
    return written, refused


def _diagnose(record: VerificationRecord, target: str) -> None:
    """What the failure means, from the signatures the repair loop uses too."""
    from ..diagnose import diagnose

    found = diagnose(record.get("failure") or record.get("target") or {}, target)
    where = f" at {found.file}:{found.line}" if found.file else ""
    emit("text", f"diagnosis: {found.signature}{where}: {found.cause}")
    if found.hint:
        emit("text", f"what to do: {found.hint}")


def _read(path: Path) -> str | None:
    try:
        return read_exact(path, errors="surrogateescape")
    except OSError:
        return None


def _toggle(state: ChatState, undo: bool) -> ChatState:
    """/undo and /redo: take changes back or put them back; by rule code, remember it."""
    verb = "undo" if undo else "redo"
    changes = state.get("changes") or []
    arg = state["command"].get("arg", "").strip()
    if not changes:
        emit("text", f"Nothing proposed: nothing to {verb}.")
        return {}
    if not arg:
        emit("text", f"Which? /{verb} N (see /diff), /{verb} CODE, /{verb} FILE or /{verb} all")
        return {}
    chosen = _select(changes, arg)
    if not chosen:
        emit("error", f"no change matches {arg!r}")
        return {}
    ids = {c["id"] for c in chosen}
    was = set(state.get("undone") or [])
    undone = sorted(was | ids) if undo else sorted(was - ids)
    moved = [c for c in chosen if (c["id"] in was) != undo]
    if not moved:
        emit("text", f"already {'undone' if undo else 'proposed'}: nothing to {verb}")
    for c in moved:
        emit("text", f"{'undone' if undo else 'redone'} [{c['id']}] {where(c)} {made_by(c)}")
    kept = set(state.get("kept_back") or [])
    codes = {r for c in chosen for r in c.get("rules") or [] if r.startswith(arg.upper())}
    if codes and not arg.isdigit():
        kept = kept | codes if undo else kept - codes
    return {"undone": undone, "kept_back": sorted(kept)}


def _adopt(
    state: ChatState,
    client: Any,
    overlay: dict[str, str],
    changed: dict[str, str],
    record: RepairRecord,
    why: str,
) -> ChatState:
    """An LLM edit of the current overlay becomes the new proposal, its hunks numbered anew."""
    usage = client.usage_snapshot().to_json()
    if changed == overlay:
        reason = record.get("error") or record.get("summary") or record["status"]
        emit("text", f"The LLM proposed no change ({record['status']}: {reason}).")
        return {"llm_usage": usage}
    source = Path(state["source"])
    base = {**state["base"]}
    base.update({rel: _read(source / rel) or "" for rel in changed if rel not in base})
    edits = [*(state.get("edits") or [])]
    edits += [{**e, "by": "llm", "for": why} for e in record["edits"]]
    found = ch.split(base, changed, edits)
    emit("text", f"The LLM proposes: {record.get('summary') or 'an edit'} (/diff, /verify).")
    if state.get("undone"):
        emit("text", "Changes you had undone are no longer in the list (they stay out).")
    list_changes(found, set())
    return {
        "base": base,
        "proposal": changed,
        "changes": found,
        "edits": edits,
        "undone": [],
        "verification": None,
        "verified": None,
        "llm_usage": usage,
    }


def _select(changes: list[Change], arg: str) -> list[Change]:
    """``all``, ids (``3`` or ``3 5``), a rule code or prefix, or a file path."""
    if arg == "all":
        return list(changes)
    words = arg.replace(",", " ").split()
    if words and all(w.isdigit() for w in words):
        ids = {int(w) for w in words}
        return [c for c in changes if c["id"] in ids]
    by_rule = [c for c in changes if any(r.startswith(arg.upper()) for r in c.get("rules") or [])]
    return by_rule or [c for c in changes if c["path"] == arg]
