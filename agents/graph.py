"""The agent graph: plan -> rewrite -> verify -> (diagnose -> rewrite -> verify)* -> report.

A langgraph ``StateGraph`` over the small state in ``agents.state``. Nodes
return only what they change; edges are explicit functions of the state; every
node appends its decisions to the log the report shows. State is checkpointed
in SQLite after every node, so ``resume(run_id)`` continues a killed run from
its last finished node: nodes recompute their scratch folders from the
checkpointed overlay, never from what a killed node left on disk.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from torchport.tools.catalogue import load_catalogue
from torchport.tools.scanner import ScanOptions, scan

from . import rewriter, runs, verifier
from .checkpoints import open_checkpointer
from .deliver import deliver
from .environment import prepare_environment
from .planner import make_plan
from .state import Settings, State, decision
from .workspace import materialize

DEFAULTS: Settings = {
    "select": [],
    "entry": None,
    "verify": True,
    "steps": 5,
    "timeout_s": 300.0,
    "memory_mb": 4096,
    "isolation": "auto",
    "max_iterations": 3,
    "max_llm_tokens": 60_000,
    "max_wall_s": 1800.0,
    "llm": "none",
}
MAX_CONSTRUCT_REPAIRS = 8


class GraphError(RuntimeError):
    """A run cannot start or resume (unknown run id, bad settings)."""


@dataclass
class Runtime:
    """What nodes need but a checkpoint cannot hold: the LLM client and the progress line."""

    run_id: str
    say: Callable[[str], None] = lambda message: None
    llm_factory: Callable[[Settings], Any] | None = None  # settings -> LLMClient | None
    _client: Any = field(default=None, repr=False)
    _resolved: bool = False

    @property
    def scratch(self) -> Path:
        return runs.run_dir(self.run_id)

    def llm(self, settings: Settings) -> Any:
        if not self._resolved:
            self._resolved = True
            if self.llm_factory is not None and settings.get("llm", "none") != "none":
                self._client = self.llm_factory(settings)
        return self._client


def _timed(node: Callable[[State], dict[str, Any]]) -> Callable[[State], dict[str, Any]]:
    def wrapper(state: State) -> dict[str, Any]:
        started = time.perf_counter()
        update = node(state)
        update["elapsed_s"] = time.perf_counter() - started
        return update

    wrapper.__name__ = node.__name__
    return wrapper


def _as_dict(value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return dict(value)


def build(runtime: Runtime) -> StateGraph:
    """The graph, uncompiled; ``compile(checkpointer=...)`` makes it runnable."""

    def plan(state: State) -> dict[str, Any]:
        s = state["settings"]
        runtime.say("planning: scanning the repository")
        source = Path(s["source"])
        scanned = scan(source, ScanOptions(target=s["target"], select=tuple(s.get("select", []))))
        p = make_plan(source, scanned, s["target"], s.get("entry"))
        runtime.say(
            f"plan: {p.auto} automatic fixes, {len(p.llm)} for the LLM, {len(p.manual)} for a "
            f"human; entry: {' '.join(p.entry) if p.entry else p.not_runnable}"
        )
        return {
            "plan": p.to_json(),
            "iteration": 0,
            "reference": None,
            "next_fix": None,
            "decisions": [
                decision(
                    "plan",
                    "entry point" if p.entry else "not runnable",
                    entry=p.entry,
                    why=p.entry_reason or p.not_runnable,
                    rejected=p.rejected,
                    auto=p.auto,
                    llm=len(p.llm),
                    manual=len(p.manual),
                )
            ],
        }

    def rewrite(state: State) -> dict[str, Any]:
        s = state["settings"]
        source = Path(s["source"])
        log: list[dict[str, Any]] = []
        agent_edits: list[dict[str, Any]] = []
        overlay = state.get("overlay")
        fix = state.get("next_fix") or {}
        first = overlay is None
        wants_llm = (first and state["plan"].get("llm")) or fix.get("kind") in ("llm", "constructs")
        client = runtime.llm(s) if wants_llm else None  # the local model starts only if needed
        usage = dict(state.get("llm_usage") or {})

        def ask(request: dict[str, Any], why: str) -> None:
            nonlocal overlay, usage
            overlay, record = rewriter.llm_repair(
                client,
                source,
                overlay,
                runtime.scratch / "llm",
                request,
                max_turns=6,
                max_tokens=s["max_llm_tokens"] - _tokens(usage),
            )
            usage = _add_usage(usage, record["usage"])
            agent_edits.extend({**e, "by": "llm", "for": why} for e in record["edits"])
            log.append(decision("rewrite", f"LLM {record['status']}", **_brief(record)))

        if first:
            runtime.say("rewriting: applying the catalogue's codemods")
            overlay, summary = rewriter.codemods(
                source, s["target"], s.get("select", []), s.get("annotate", False)
            )
            log.append(decision("rewrite", "codemods", **summary))
            if state["plan"].get("llm") and client is None:
                log.append(
                    decision(
                        "rewrite",
                        "left for a human (no LLM configured)",
                        items=len(state["plan"]["llm"]),
                    )
                )
        if client is not None and (first or fix.get("kind") == "constructs"):
            # Located again on the migrated code (the codemods moved lines), and taken
            # bottom-up so that an edit never shifts the lines of one still to come.
            items = rewriter.llm_constructs(source, overlay, runtime.scratch / "scan", s)
            for item in items[:MAX_CONSTRUCT_REPAIRS]:
                if _tokens(usage) >= s["max_llm_tokens"]:
                    log.append(decision("rewrite", "LLM token budget spent", item=item["rule"]))
                    break
                runtime.say(f"rewriting: asking the LLM about {item['rule']} at {item['path']}")
                ask(rewriter.construct_request(item, s["target"]), item["rule"])
        if fix.get("kind") == "rules":
            runtime.say(f"rewriting: applying rules {', '.join(fix['rules'])} again")
            log.append(
                decision("rewrite", "rules re-run", rules=fix["rules"], files=sorted(fix["files"]))
            )
            overlay = {**overlay, **fix["files"]}
        elif fix.get("kind") == "llm" and client is not None:
            runtime.say(f"rewriting: asking the LLM to repair {fix['request']['path']}")
            ask(fix["request"], "failure")
        touched = sorted({e["path"] for e in agent_edits})
        if touched:
            pruned = rewriter.prune_cuda_imports(
                source, overlay, runtime.scratch / "prune", touched
            )
            if pruned != overlay:
                dropped = sorted(k for k in pruned if pruned[k] != overlay.get(k))
                log.append(decision("rewrite", "unused CUDA-only imports removed", files=dropped))
                overlay = pruned
        return {
            "overlay": overlay,
            "next_fix": None,
            "decisions": log,
            "agent_edits": [*(state.get("agent_edits") or []), *agent_edits],
            "llm_usage": usage,
        }

    def verify(state: State) -> dict[str, Any]:
        s = state["settings"]
        p = state["plan"]
        iteration = state.get("iteration", 0) + 1
        update: dict[str, Any] = {"iteration": iteration}
        why_not = p.get("not_runnable")
        if why_not:
            v = verifier.Verification("not-runnable", why_not)
            update["verification"] = v.to_json()
            update["decisions"] = [decision("verify", "not-runnable", why=why_not)]
            return update
        budget = verifier.budget_of(s)
        source = Path(s["source"])
        reference = state.get("reference")
        overlay = state.get("overlay") or {}
        environment = state.get("environment")
        if environment is None:
            environment = prepare_environment(
                source,
                s.get("deps", "auto"),
                runtime.say,
                s.get("python"),
                entry=p["entry"],
                time_limit_s=budget.timeout_s,
            )
            update["environment"] = environment
        work = materialize(source, overlay, runtime.scratch / "work")
        v, ran = verifier.verify_tree(
            source,
            work,
            p["entry"],
            s["target"],
            budget,
            runs.home() / "references",
            reference=reference,
            say=runtime.say,
            environment=environment,
        )
        if reference is None:
            update["reference"] = ran
        runtime.say(f"verdict: {v.verdict} ({v.reason})")
        update["verification"] = v.to_json()
        update["decisions"] = [
            decision("verify", v.verdict, why=v.reason, policy=v.policy, iteration=iteration)
        ]
        best = state.get("best")
        rank = verifier.rank(update["verification"])
        if best is not None and rank < best["rank"]:
            runtime.say("the last repair made it worse: undoing it")
            update.update(
                overlay=best["overlay"],
                agent_edits=best["agent_edits"],
                verification=best["verification"],
            )
            update["decisions"].append(
                decision("verify", "reverted", why=f"worse than round {best['iteration']}")
            )
        else:
            update["best"] = {
                "overlay": overlay,
                "agent_edits": state.get("agent_edits") or [],
                "verification": update["verification"],
                "rank": rank,
                "iteration": iteration,
            }
        return update

    def diagnose(state: State) -> dict[str, Any]:
        from .diagnose import diagnose as classify

        s = state["settings"]
        v = state["verification"] or {}
        found = _as_dict(classify(v.get("failure") or v.get("target") or {}, s["target"]))
        tried = {
            (d.get("signature"), d.get("file"), d.get("line"), d.get("fix"))
            for d in state.get("decisions", [])
            if d.get("node") == "diagnose"
        }
        fix: dict[str, Any] | None = None
        overlay = state.get("overlay") or {}
        if not found.get("file") and state.get("agent_edits") and runtime.llm(s) is not None:
            # A crash-free failure (parity) has no frame: the LLM's own edits are the
            # likeliest cause; each is revisited once, newest first, with its original.
            for edit in reversed(state["agent_edits"]):
                request = rewriter.edit_request(edit, overlay, v, s["target"])
                if request is None:
                    continue
                line = request["start_line"]
                if (found.get("signature"), edit["path"], line, "llm") not in tried:
                    found.update(file=edit["path"], line=line)
                    found["cause"] = f"{found.get('cause')}; revisiting the LLM's edit there"
                    fix = {"kind": "llm", "request": request}
                    break
        key = (found.get("signature"), found.get("file"), found.get("line"))
        action = found.get("action")
        has_llm = action in ("rules", "llm") and runtime.llm(s) is not None
        rules = _allowed(found.get("rules") or [], s.get("select") or [])
        if fix is None and action == "rules" and rules and (*key, "rules") not in tried:
            updated = rewriter.apply_rules(
                Path(s["source"]), overlay, runtime.scratch / "rules", s["target"], rules
            )
            if updated != overlay:  # only a rule that changes something is worth a round
                # the changed files travel with the fix: rewrite applies, not recomputes
                changed = {k: v for k, v in updated.items() if overlay.get(k) != v}
                fix = {"kind": "rules", "rules": rules, "files": changed}
        missing_library = str(found.get("signature", "")).startswith("missing-")
        if fix is None and has_llm and missing_library and (*key, "constructs") not in tried:
            # A CUDA-only library still imported: its remaining uses are catalogue
            # constructs; fixing those (and dropping the unused import) is the repair.
            remaining = rewriter.llm_constructs(
                Path(s["source"]), overlay, runtime.scratch / "scan", s
            )
            if remaining:
                fix = {"kind": "constructs", "items": len(remaining)}
        if fix is None and has_llm:
            request = rewriter.failure_request(found, v, s["target"])
            if request is not None and (*key, "llm") not in tried:
                fix = {"kind": "llm", "request": request}
        why = f"{found.get('signature')}: {found.get('cause')}"
        if not fix:
            why += _no_fix_reason(action, has_llm, bool(found.get("limitation")))
        runtime.say(f"diagnosis: {why}")
        return {
            "diagnosis": found,
            "next_fix": fix,
            "decisions": [
                decision(
                    "diagnose",
                    fix["kind"] if fix else "stop",
                    signature=found.get("signature"),
                    file=found.get("file"),
                    line=found.get("line"),
                    fix=fix["kind"] if fix else None,
                    why=why,
                )
            ],
        }

    def report(state: State) -> dict[str, Any]:
        v = state.get("verification")
        outcome = v["verdict"] if v else "not verified"
        runtime.say("reporting: writing the migration and its evidence")
        written = deliver(state, outcome, runtime.say)
        return {"outcome": outcome, "decisions": [decision("report", outcome, **written)]}

    def after_rewrite(state: State) -> str:
        return "verify" if state["settings"].get("verify", True) else "report"

    def after_verify(state: State) -> str:
        v = state.get("verification") or {}
        if v.get("verdict") != "failed":
            return "report"
        s = state["settings"]
        if state.get("iteration", 0) > s["max_iterations"]:
            return "report"
        if state.get("elapsed_s", 0.0) > s["max_wall_s"]:
            return "report"
        return "diagnose"

    def after_diagnose(state: State) -> str:
        return "rewrite" if state.get("next_fix") else "report"

    graph = StateGraph(State)
    for name, node in (
        ("plan", plan),
        ("rewrite", rewrite),
        ("verify", verify),
        ("diagnose", diagnose),
        ("report", report),
    ):
        graph.add_node(name, _timed(node))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "rewrite")
    graph.add_conditional_edges("rewrite", after_rewrite, ["verify", "report"])
    graph.add_conditional_edges("verify", after_verify, ["diagnose", "report"])
    graph.add_conditional_edges("diagnose", after_diagnose, ["rewrite", "report"])
    graph.add_edge("report", END)
    return graph


def _tokens(usage: dict[str, Any]) -> int:
    return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))


def _add_usage(total: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(total)
    for key, value in (more or {}).items():
        if isinstance(value, int | float):
            out[key] = out.get(key, 0) + value
    return out


def _brief(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": record["request"]["path"],
        "lines": [record["request"]["start_line"], record["request"]["end_line"]],
        "summary": record.get("summary", ""),
        "turns": record.get("turns"),
        "edits": len(record.get("edits", [])),
        "error": record.get("error"),
    }


def _allowed(rules: list[str], select: list[str]) -> list[str]:
    """The diagnosis's rules, within the user's --rules selection if there is one."""
    if not select:
        return list(rules)
    chosen = {r.code for r in load_catalogue().select(select)}
    return [r for r in rules if r in chosen]


def _no_fix_reason(action: str | None, has_llm: bool, limitation: bool = False) -> str:
    """Why the loop stops here; a cause in torchport's own sandbox or emulator is said to
    be one, so a reader does not go looking for a fix in the port."""
    if action == "human":
        if limitation:
            return " (a limitation of torchport's sandbox or emulator, not of the port)"
        return " (needs a human: no change to the code fixes it)"
    if not has_llm:
        return " (no deterministic fix; no LLM configured, see --llm)"
    return " (already tried; nothing new to try)"


@contextmanager
def checkpointed(runtime: Runtime, db: Path | None = None) -> Iterator[Any]:
    """The compiled graph with its SQLite checkpointer open."""
    with open_checkpointer(db or runs.checkpoint_db()) as saver:
        yield build(runtime).compile(checkpointer=saver)


def _config(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}, "recursion_limit": 64}


def start(settings: Settings, runtime: Runtime, db: Path | None = None) -> State:
    """Run a migration from the beginning under ``runtime.run_id``; returns the final state."""
    full: Settings = {**DEFAULTS, **settings}  # type: ignore[typeddict-item]
    with checkpointed(runtime, db) as app:
        for update in app.stream(
            {"settings": full}, _config(runtime.run_id), stream_mode="updates"
        ):
            _announce(runtime, update)
        return _finished(app, runtime.run_id)


def _finished(app: Any, run_id: str) -> State:
    """The run's final state; its scratch folder goes once no node is left to run."""
    snapshot = app.get_state(_config(run_id))
    if not snapshot.next:
        runs.remove_run_dir(run_id)
    return snapshot.values


def saved_state(run_id: str, db: Path | None = None) -> tuple[State, tuple[str, ...]]:
    """A run's last checkpoint and the nodes still to run (empty when it finished)."""
    with checkpointed(Runtime(run_id), db) as app:
        snapshot = app.get_state(_config(run_id))
    if not snapshot.values:
        raise GraphError(f"no run {run_id!r} in {db or runs.checkpoint_db()}")
    return snapshot.values, tuple(snapshot.next)


def resume(runtime: Runtime, db: Path | None = None) -> State:
    """Continue a killed run from its last finished node; a finished run is returned as is."""
    _, pending = saved_state(runtime.run_id, db)
    with checkpointed(runtime, db) as app:
        if pending:
            runtime.say(f"resuming {runtime.run_id} at {', '.join(pending)}")
            for update in app.stream(None, _config(runtime.run_id), stream_mode="updates"):
                _announce(runtime, update)
        return _finished(app, runtime.run_id)


def _announce(runtime: Runtime, update: dict[str, Any]) -> None:
    for node in update:
        runtime.say(f"{node}: finished")
