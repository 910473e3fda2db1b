"""A chat session as a langgraph graph: listen -> command node -> listen, until /quit.

Waiting for the person is a langgraph ``interrupt`` (in ``listen``, and in
``apply`` for the approval), so the whole session -- proposal, undone changes,
verdict -- is checkpointed in SQLite after every command and a killed terminal
resumes where it stopped (``torchport chat --resume ID``). Nodes speak through
langgraph's custom stream (``emit``): the driver renders those events as they
come, which is how a long verification shows its progress. Nothing is written
to the repository except by ``apply``, after the person said yes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.scanner import ScanOptions, scan

from .. import runs, verifier
from ..planner import make_plan
from ..workspace import materialize
from . import changes as ch
from .commands import BY_NAME, help_rows, parse

MAX_ROWS = 40
YES = ("y", "yes")


class ChatState(TypedDict, total=False):
    session_id: str
    source: str
    target: str
    llm: str
    budget: dict[str, Any]  # steps, timeout_s, memory_mb, isolation
    command: dict[str, str]  # the latest, parsed
    plan: dict[str, Any] | None
    base: dict[str, str]  # original text of each file the proposal changes
    proposal: dict[str, str]  # proposed text of each changed file
    changes: list[dict[str, Any]]
    edits: list[dict[str, Any]]  # what made the proposal (codemod and LLM edits), for /diff
    undone: list[int]
    # Rule codes the person took back by code ("leave the profiler alone"): a later
    # /migrate proposes their changes already undone.
    kept_back: list[str]
    verification: dict[str, Any] | None
    verified: str | None  # digest of the overlay the verification is about
    reference: dict[str, Any] | None  # the original's run (target independent)
    applied: list[dict[str, Any]]
    llm_usage: dict[str, Any]


@dataclass
class ChatRuntime:
    """What the session needs but its checkpoint cannot hold: the LLM client."""

    session_id: str
    llm_factory: Callable[[dict[str, Any]], Any] | None = None
    _client: Any = field(default=None, repr=False)
    _resolved: bool = False

    def llm(self, flag: str) -> Any:
        if not self._resolved:
            self._resolved = True
            if self.llm_factory is not None and flag != "none":
                self._client = self.llm_factory({"llm": flag})
        return self._client

    @property
    def scratch(self) -> Path:
        return runs.run_dir(f"chat-{self.session_id}")


def emit(kind: str, text: str = "", **more: Any) -> None:
    """Send one event to whoever drives the session (a terminal, a test)."""
    get_stream_writer()({"kind": kind, "text": text, **more})


def progress() -> Callable[[str], None]:
    """A progress reporter bound to this node's stream: safe to call from other threads
    (the sandbox's step watcher) and from inside the inner migration graph."""
    write = get_stream_writer()
    return lambda message: write({"kind": "progress", "text": message})


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    shown = rows[:MAX_ROWS]
    emit("table", title=title, columns=columns, rows=[[str(c) for c in r] for r in shown])
    if len(rows) > MAX_ROWS:
        emit("text", f"... and {len(rows) - MAX_ROWS} more")


def overlay_of(state: ChatState) -> dict[str, str]:
    return ch.current(
        state.get("base") or {},
        state.get("proposal") or {},
        state.get("changes") or [],
        set(state.get("undone") or []),
    )


def digest(overlay: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(overlay, sort_keys=True).encode()).hexdigest()[:16]


def _where(change: dict[str, Any]) -> str:
    return f"{change['path']}:{change['span'][0] + 1}"


def _made_by(change: dict[str, Any]) -> str:
    rules = ", ".join(change.get("rules") or [])
    return f"{change['by']} {rules}".strip()


def build(runtime: ChatRuntime) -> StateGraph:
    """The session graph, uncompiled; it needs a checkpointer (interrupts do)."""

    def greet(state: ChatState) -> dict[str, Any]:
        n = len(state.get("changes") or [])
        emit(
            "text",
            f"torchport chat: {state['source']} -> {state['target']} (session "
            f"{state['session_id']}; {n} changes proposed). Type /help for commands.",
        )
        return {}

    def listen(state: ChatState) -> dict[str, Any]:
        line = interrupt({"kind": "input"})
        return {"command": parse(str(line))}

    def ask(state: ChatState) -> dict[str, Any]:
        from .intent import interpret

        text = state["command"].get("text", "")
        if not text:
            return {"command": {"name": "none"}}
        client = runtime.llm(state.get("llm", "none"))
        if client is None:
            emit(
                "text",
                "No LLM is configured, so plain language is not understood; slash commands "
                "work (/help). Start with --llm local or --llm URL for conversation.",
            )
            return {"command": {"name": "none"}}
        emit("progress", "asking the LLM what you mean")
        found = interpret(client, text, state)
        usage = client.usage_snapshot().to_json()
        if "command" in found:
            emit("text", f"-> {found['said']}")
            return {"command": found["command"], "llm_usage": usage}
        if "answer" in found:
            emit("text", found["answer"])
        else:
            emit("error", found["error"])
        return {"command": {"name": "none"}, "llm_usage": usage}

    def scan_node(state: ChatState) -> dict[str, Any]:
        found = scan(Path(state["source"]), ScanOptions(target=state["target"])).findings
        rows = [
            [f.rule, f"{f.path}:{f.line}", f.fix[state["target"]]["kind"], f.message] for f in found
        ]
        table(f"{len(found)} constructs for {state['target']}", ["rule", "where", "fix", ""], rows)
        return {}

    def plan_node(state: ChatState) -> dict[str, Any]:
        p = _plan(state)
        entry = " ".join(p["entry"]) if p.get("entry") else f"not runnable: {p['not_runnable']}"
        emit("text", f"run as: {entry} ({p.get('entry_reason', '')})")
        emit(
            "text",
            f"{p['auto']} automatic fixes, {len(p['llm'])} for an LLM, {len(p['manual'])} for you",
        )
        rows = _item_rows([*p["llm"], *p["manual"]])
        if rows:
            table("not automatic", ["rule", "where", "what to do"], rows)
        return {"plan": p}

    def _plan(state: ChatState) -> dict[str, Any]:
        source = Path(state["source"])
        found = scan(source, ScanOptions(target=state["target"]))
        return make_plan(source, found, state["target"]).to_json()

    def migrate_node(state: ChatState) -> dict[str, Any]:
        from .. import graph
        from ..deliver import migration_result

        settings = {
            **graph.DEFAULTS,
            "source": state["source"],
            "target": state["target"],
            "verify": False,  # /verify is its own step here
            "dry_run": True,
            "llm": state.get("llm", "none"),
            "run_id": f"chat-{state['session_id']}",
        }

        inner = graph.Runtime(settings["run_id"], progress(), lambda s: runtime.llm(s["llm"]))
        final = graph.build(inner).compile(checkpointer=False).invoke({"settings": settings})
        proposal = final.get("overlay") or {}
        source = Path(state["source"])
        base = {rel: (source / rel).read_text(encoding="utf-8") for rel in proposal}
        result = migration_result(final)
        edits = [dataclasses.asdict(e) for e in result.edits]
        edits += [{**e, "by": "llm"} for e in final.get("agent_edits") or []]
        found = ch.split(base, proposal, edits)
        by_llm = sum(1 for c in found if c["by"] == "llm")
        emit(
            "text",
            f"proposed {len(found)} changes in {len(proposal)} files "
            f"({by_llm} by the LLM); {len(result.left_for_humans)} constructs left for you "
            "(/plan). Nothing is written until /apply.",
        )
        kept = set(state.get("kept_back") or [])
        undone = [c["id"] for c in found if set(c.get("rules") or []) & kept]
        if undone:
            emit("text", f"left undone as you asked ({', '.join(sorted(kept))}): /redo to add")
        _list_changes(found, set(undone))
        return {
            "plan": final.get("plan"),
            "base": base,
            "proposal": proposal,
            "changes": found,
            "edits": edits,
            "undone": undone,
            "verification": None,
            "verified": None,
            "llm_usage": final.get("llm_usage") or state.get("llm_usage") or {},
        }

    def diff_node(state: ChatState) -> dict[str, Any]:
        changes = state.get("changes") or []
        if not changes:
            emit("text", "Nothing proposed yet: /migrate first.")
            return {}
        path = state["command"].get("arg") or None
        if path and path not in (state.get("proposal") or {}):
            emit("error", f"no proposed change in {path}; changed: {', '.join(state['proposal'])}")
            return {}
        undone = set(state.get("undone") or [])
        for c in changes:
            if path and c["path"] != path:
                continue
            status = " (undone)" if c["id"] in undone else ""
            emit("text", f"[{c['id']}] {_where(c)} {_made_by(c)}{status}")
            if not status:
                emit("diff", ch.hunk(state["base"], state["proposal"], c))
        return {}

    def explain(state: ChatState) -> dict[str, Any]:
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
        if change is None:
            emit("error", "explain what? /explain TPD001, /explain 3 or /explain train.py:40")
            return {}
        emit("text", f"[{change['id']}] {_where(change)} {_made_by(change)}")
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

    def verify(state: ChatState) -> dict[str, Any]:
        overlay = overlay_of(state)
        if not state.get("changes"):
            emit("text", "Nothing proposed yet: /migrate first.")
            return {}
        p = state.get("plan") or _plan(state)
        if p.get("not_runnable"):
            emit("text", f"not-runnable: {p['not_runnable']}")
            return {"plan": p}
        b = state.get("budget") or {}
        budget = verifier.Budget(
            steps=b.get("steps", 5),
            forwards=b.get("steps", 5),
            timeout_s=b.get("timeout_s", 300.0),
            memory_mb=b.get("memory_mb", 4096),
            isolation=b.get("isolation", "auto"),
        )
        source = Path(state["source"])
        work = materialize(source, overlay, runtime.scratch / "work")
        v, reference = verifier.verify_tree(
            source,
            work,
            p["entry"],
            state["target"],
            budget,
            runs.home() / "references",
            reference=state.get("reference"),
            say=progress(),
        )
        record = v.to_json()
        emit("text", f"verdict: {v.verdict} — {v.reason}")
        if v.verdict == "failed":
            _diagnose(record, state["target"])
        per_step = (record.get("parity") or {}).get("per_step") or []
        if per_step:
            rows = [[s["step"], f"{s['reference']:.6g}", f"{s['target']:.6g}"] for s in per_step]
            table("losses", ["step", "original (shim)", "migrated (emulated)"], rows)
        return {
            "plan": p,
            "verification": record,
            "verified": digest(overlay),
            "reference": reference,
        }

    def fix(state: ChatState) -> dict[str, Any]:
        from .. import rewriter
        from ..diagnose import diagnose

        overlay = overlay_of(state)
        v = state.get("verification") or {}
        if v.get("verdict") != "failed" or state.get("verified") != digest(overlay):
            emit("text", "Nothing to fix: /fix repairs what /verify found in this proposal.")
            return {}
        client = runtime.llm(state.get("llm", "none"))
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
            client, source, overlay, runtime.scratch / "llm", request, max_turns=6, max_tokens=None
        )
        return _adopt(state, client, overlay, repaired, record, found["signature"])

    def edit(state: ChatState) -> dict[str, Any]:
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
        client = runtime.llm(state.get("llm", "none"))
        if client is None:
            emit("text", "/edit needs an LLM: start the session with --llm local or --llm URL.")
            return {}
        overlay = overlay_of(state)
        before = _read(source / path) or ""
        after = overlay.get(path, before)
        first = ch.map_line(before, after, int(start))
        last = ch.map_line(before, after, int(end or start))
        request = {
            "kind": "instruction",
            "target": state["target"],
            "path": path,
            "start_line": first,
            "end_line": max(first, last),
            "problem": instruction.strip(),
        }
        emit("progress", f"asking the LLM to change {path} lines {first}-{max(first, last)}")
        changed, record = rewriter.llm_repair(
            client, source, overlay, runtime.scratch / "llm", request, max_turns=6, max_tokens=None
        )
        return _adopt(state, client, overlay, changed, record, "your request")

    def apply(state: ChatState) -> dict[str, Any]:
        overlay = overlay_of(state)
        if not overlay:
            emit("text", "Nothing to apply.")
            return {}
        source = Path(state["source"])
        stale = [
            rel
            for rel in overlay
            if _read(source / rel) not in (state["base"].get(rel), overlay[rel])
        ]
        if stale:
            emit("error", f"changed on disk since /migrate: {', '.join(stale)}; /migrate again")
            return {}
        v = state.get("verification") or {}
        status = (
            v.get("verdict", "not verified")
            if state.get("verified") == digest(overlay)
            else "not verified since the last change"
        )
        active = len(state["changes"]) - len(state.get("undone") or [])
        question = (
            f"Write {active} changes to {len(overlay)} files in {source} "
            f"({', '.join(sorted(overlay))}); verification: {status}. Apply? [y/N] "
        )
        answer = interrupt({"kind": "confirm", "question": question})
        if str(answer).strip().lower() not in YES:
            emit("text", "Not applied; the proposal is kept.")
            return {}
        applied = list(state.get("applied") or [])
        backup = runtime.scratch / f"backup-{len(applied) + 1}"
        from torchport.tools.migrate import atomic_write

        for rel, text in sorted(overlay.items()):
            target = source / rel
            saved = backup / rel
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(state["base"][rel], encoding="utf-8")
            atomic_write(target, text)
        emit("text", f"Applied to {len(overlay)} files; the originals are in {backup}.")
        applied.append({"files": sorted(overlay), "backup": str(backup), "status": status})
        return {
            "applied": applied,
            "base": {},
            "proposal": {},
            "changes": [],
            "undone": [],
        }

    def undo(state: ChatState) -> dict[str, Any]:
        return _toggle(state, undo=True)

    def redo(state: ChatState) -> dict[str, Any]:
        return _toggle(state, undo=False)

    def target(state: ChatState) -> dict[str, Any]:
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

    def report(state: ChatState) -> dict[str, Any]:
        changes = state.get("changes") or []
        undone = state.get("undone") or []
        overlay = overlay_of(state)
        v = state.get("verification") or {}
        fresh = state.get("verified") == digest(overlay) and v
        usage = state.get("llm_usage") or {}
        rows = [
            ["repository", state["source"]],
            ["target", state["target"]],
            ["changes", f"{len(changes) - len(undone)} proposed, {len(undone)} undone"],
            ["files", ", ".join(sorted(overlay)) or "-"],
            ["verification", v.get("verdict", "-") + ("" if fresh or not v else " (stale)")],
            ["applied", "; ".join(", ".join(a["files"]) for a in state.get("applied") or [])],
            ["LLM tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)],
        ]
        table(f"session {state['session_id']}", ["", ""], rows)
        manual = (state.get("plan") or {}).get("manual") or []
        if manual:
            table(
                "left for you",
                ["rule", "where", "what to do"],
                _item_rows(manual),
            )
        if overlay:
            path = runtime.scratch / "proposal.patch"
            path.write_text(ch.diff(state["base"], overlay), encoding="utf-8")
            emit("text", f"the proposal as a patch: {path}")
        return {}

    def help_node(state: ChatState) -> dict[str, Any]:
        if state["command"].get("error"):
            emit("error", state["command"]["error"])
        table("commands", ["command", "what it does"], help_rows())
        llm = state.get("llm", "none")
        emit(
            "text",
            "Plain language works too: "
            + ("the LLM turns it into a command." if llm != "none" else "start with --llm."),
        )
        return {}

    def quit_node(state: ChatState) -> dict[str, Any]:
        emit("text", f"Session saved. Resume with: torchport chat --resume {state['session_id']}")
        return {}

    nodes: dict[str, Callable[[ChatState], dict[str, Any]]] = {
        "scan": scan_node,
        "plan": plan_node,
        "migrate": migrate_node,
        "diff": diff_node,
        "explain": explain,
        "verify": verify,
        "fix": fix,
        "edit": edit,
        "apply": apply,
        "undo": undo,
        "redo": redo,
        "target": target,
        "report": report,
        "help": help_node,
        "quit": quit_node,
    }
    assert set(nodes) == set(BY_NAME), "every command in commands.COMMANDS needs a node"

    def dispatch(state: ChatState) -> str:
        name = (state.get("command") or {}).get("name", "none")
        return name if name in nodes or name == "ask" else "listen"

    g = StateGraph(ChatState)
    g.add_node("greet", greet)
    g.add_node("listen", listen)
    g.add_node("ask", ask)
    for name, node in nodes.items():
        g.add_node(name, node)
        if name != "quit":
            g.add_edge(name, "listen")
    g.add_edge(START, "greet")
    g.add_edge("greet", "listen")
    g.add_conditional_edges("listen", dispatch, [*nodes, "ask", "listen"])
    g.add_conditional_edges("ask", dispatch, [*nodes, "listen"])
    g.add_edge("quit", END)
    return g


def _diagnose(record: dict[str, Any], target: str) -> None:
    """What the failure means, from the signatures the repair loop uses too."""
    from ..diagnose import diagnose

    found = diagnose(record.get("failure") or record.get("target") or {}, target)
    where = f" at {found.file}:{found.line}" if found.file else ""
    emit("text", f"diagnosis: {found.signature}{where}: {found.cause}")
    if found.hint:
        emit("text", f"what to do: {found.hint}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def _list_changes(changes: list[dict[str, Any]], undone: set[int]) -> None:
    rows = [
        [c["id"], _where(c), _made_by(c), "undone" if c["id"] in undone else ""] for c in changes
    ]
    if rows:
        title = "changes (/diff to see them, /undo N to take one back)"
        table(title, ["#", "where", "by", ""], rows)


def _toggle(state: ChatState, undo: bool) -> dict[str, Any]:
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
        emit("text", f"{'undone' if undo else 'redone'} [{c['id']}] {_where(c)} {_made_by(c)}")
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
    record: dict[str, Any],
    why: str,
) -> dict[str, Any]:
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
    _list_changes(found, set())
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


def _item_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    return [[m.get("rule"), f"{m.get('path')}:{m.get('line')}", m.get("hint", "")] for m in items]


def _find_change(state: ChatState, arg: str) -> dict[str, Any] | None:
    changes = state.get("changes") or []
    if arg.isdigit():
        return next((c for c in changes if c["id"] == int(arg)), None)
    path, _, line = arg.rpartition(":")
    if line.isdigit():
        return ch.at_line(changes, path or None, int(line))
    return None


def _select(changes: list[dict[str, Any]], arg: str) -> list[dict[str, Any]]:
    """``all``, ids (``3`` or ``3 5``), a rule code or prefix, or a file path."""
    if arg == "all":
        return list(changes)
    words = arg.replace(",", " ").split()
    if words and all(w.isdigit() for w in words):
        ids = {int(w) for w in words}
        return [c for c in changes if c["id"] in ids]
    by_rule = [c for c in changes if any(r.startswith(arg.upper()) for r in c.get("rules") or [])]
    return by_rule or [c for c in changes if c["path"] == arg]


def new_state(
    session_id: str, source: Path, target: str, llm: str, budget: dict[str, Any]
) -> ChatState:
    return {
        "session_id": session_id,
        "source": str(source),
        "target": target,
        "llm": llm,
        "budget": budget,
        "command": {"name": "none"},
        "changes": [],
        "undone": [],
        "kept_back": [],
        "applied": [],
        "llm_usage": {},
    }
