"""The agent graph: plan -> rewrite -> verify -> (diagnose -> rewrite -> verify)* -> deliver.

A verified round whose port runs kernels through a fallback goes to ``improve`` first, with
a model configured: it asks for a PyTorch version of each such call site once, and the next
round verifies it (``agents.kernel_improve``; the fallback port stays if it fails).

A langgraph ``StateGraph`` over the small state in ``agents.state``. The nodes are
the top-level functions below, in the order a run takes them, then the edges, then
``build``, which wires them. Nodes return only what they change; edges are explicit
functions of the state; every node appends its decisions to the log the report shows.
State is checkpointed in SQLite after every node, so ``resume(run_id)`` continues a
killed run from its last finished node: nodes recompute their scratch folders from
the checkpointed overlay, never from what a killed node left on disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from torchport.tools.findings import work_line
from torchport.tools.migration_memo import save_scan
from torchport.tools.scanner import ScanOptions, scan

from . import config_record, kernel_improve, runs, verifier
from .checkpoints import DURABILITY, open_checkpointer
from .defaults import DEFAULTS
from .deliver import deliver as write_output
from .diagnose import diagnose as classify
from .planner import make_plan, work_of
from .repair_choice import RepairContext, choose_fix, no_fix_reason, tried_fixes
from .rewrite_round import RewriteRound, tokens
from .state import (
    Best,
    NextFix,
    Settings,
    State,
    VerificationRecord,
    decision,
    scan_filters,
)
from .verdicts import Verdict
from .verify_step import verify_overlay

MAX_CONSTRUCT_REPAIRS = 8
LLM_FIXES = ("llm", "constructs", "improve")  # the fixes that need the model
PLAN_SCAN = "plan-scan.json"  # in the run's folder: the plan's scan, which the state names


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


# --- the nodes, in the order a run takes them -------------------------------------------


def plan(state: State, ctx: Runtime) -> State:
    """Scan the repository and decide how to run it and what its migration needs."""
    s = state["settings"]
    ctx.say("planning: scanning the repository")
    source = Path(s["source"])
    left_alone = scan_filters(s)
    options = ScanOptions(
        target=s["target"],
        select=tuple(s.get("select", [])),
        skip=left_alone["skip"],
        exclude=left_alone["exclude"],
    )
    scanned = scan(source, options)
    # kept in the run's folder, named in the state: the migration reads it, not a new scan
    kept = save_scan(ctx.scratch / PLAN_SCAN, source, options, scanned)
    p = make_plan(source, scanned, s["target"], s.get("entry"), config_record.entry_reason(s))
    ctx.say(
        f"plan: {work_line(work_of(p.to_json()), 'the LLM')}; "
        f"entry: {' '.join(p.entry) if p.entry else p.not_runnable}"
    )
    logged = decision(
        "plan",
        "entry point" if p.entry else "not runnable",
        entry=p.entry,
        why=p.entry_reason or p.not_runnable,
        rejected=p.rejected,
        auto=p.auto,
        llm=len(p.llm),
        manual=len(p.manual),
    )
    return {
        "plan": p.to_json(),
        "plan_scan": str(kept),
        "iteration": 0,
        "reference": None,
        "next_fix": None,
        "decisions": [logged],
    }


def rewrite(state: State, ctx: Runtime) -> State:
    """The first round applies the codemods (and the LLM to the constructs it is for);
    a later round applies the fix diagnose chose."""
    s = state["settings"]
    fix: NextFix = state.get("next_fix") or {}
    first = state.get("overlay") is None
    wants_llm = (first and state["plan"].get("llm")) or fix.get("kind") in LLM_FIXES
    work = RewriteRound(
        Path(s["source"]),
        s,
        ctx.scratch,
        state.get("overlay"),
        dict(state.get("llm_usage") or {}),
        client=ctx.llm(s) if wants_llm else None,  # the local model starts only if needed
        kernel_calls=list((state.get("reference") or {}).get("kernel_site_calls") or []),
        scan_file=state.get("plan_scan"),
    )
    if first:
        ctx.say("rewriting: applying the catalogue's codemods")
        work.run_codemods()
        if work.client is None and work.refused():
            work.client = ctx.llm(s)  # what a codemod refused, a model may port (None: no model)
        if state["plan"].get("llm") and work.client is None:
            left = len(state["plan"]["llm"])
            work.log.append(decision("rewrite", "left for a human (no LLM configured)", items=left))
    if work.client is not None and (first or fix.get("kind") == "constructs"):
        work.ask_llm_about_constructs(MAX_CONSTRUCT_REPAIRS, ctx.say)
    if fix.get("kind") == "rules":
        ctx.say(f"rewriting: applying rules {', '.join(fix['rules'])} again")
        work.apply_rule_files(fix["rules"], fix["files"])
    elif fix.get("kind") == "llm" and work.client is not None:
        ctx.say(f"rewriting: asking the LLM to repair {fix['request']['path']}")
        work.ask_llm(fix["request"], "failure")
    elif fix.get("kind") == "improve" and work.client is not None:
        ctx.say(f"rewriting: asking the LLM for a PyTorch version of {fix['request']['path']}")
        work.ask_llm(fix["request"], "improvement")
        work.unship(state.get("improving"))
    work.remove_unused_kernels()
    work.prune_imports_the_llm_left()
    return {
        "overlay": work.overlay,
        "next_fix": None,
        "decisions": work.log,
        "agent_edits": [*(state.get("agent_edits") or []), *work.agent_edits],
        "llm_usage": work.usage,
    }


def verify(state: State, ctx: Runtime) -> State:
    """Run the original and the migration, judge them, and keep the best migration so far:
    a repair that made things worse is rolled back."""
    s = state["settings"]
    iteration = state.get("iteration", 0) + 1
    outcome = verify_overlay(
        Path(s["source"]),
        state.get("overlay") or {},
        state["plan"],
        s["target"],
        s,
        ctx.scratch,
        ctx.say,
        reference=state.get("reference"),
        environment=state.get("environment"),
    )
    v = outcome.verification
    record = v.to_json()
    update: State = {"iteration": iteration, "verification": record}
    if v.verdict == Verdict.NOT_RUNNABLE and state["plan"].get("not_runnable"):
        update["decisions"] = [decision("verify", v.verdict, why=v.reason)]
        return update
    update["environment"] = outcome.environment
    if outcome.overlay is not None:  # the lines the original ran repaired, in the port too
        update["overlay"] = outcome.overlay
        state = {**state, "overlay": outcome.overlay}
    if state.get("reference") is None:
        update["reference"] = outcome.reference
    ctx.say(f"verdict: {v.verdict} ({v.reason})")
    update["decisions"] = [
        decision("verify", v.verdict, why=v.reason, policy=v.policy, iteration=iteration)
    ]
    if state.get("improving"):
        record, judged = _improvement_judged(state, record, outcome.environment, ctx)
        update["verification"], update["improving"] = record, None
        update["decisions"].append(judged)
    best = better_of(state.get("best"), this_round(state, record, iteration))
    if best["iteration"] == iteration:
        update["best"] = best
        return update
    ctx.say("the last repair made it worse: undoing it")
    update["overlay"], update["agent_edits"] = best["overlay"], best["agent_edits"]
    update["verification"] = best["verification"]
    update["decisions"].append(
        decision("verify", "reverted", why=f"worse than round {best['iteration']}")
    )
    return update


def _improvement_judged(
    state: State, record: VerificationRecord, environment: Any, ctx: Runtime
) -> tuple[VerificationRecord, dict[str, Any]]:
    """An improvement round's verdict: it must verify and, at the site it replaced, match
    the fallback port (the best round so far) as well as the original kernel."""
    fallback, best = state.get("improving") or {}, state.get("best")
    checked = None
    verified = record.get("verdict") == Verdict.VERIFIED
    if verified and best is not None and not kernel_improve.still_on_fallback(record, fallback):
        ctx.say("verifying: the replacement against the fallback port at its call site")
        s = state["settings"]
        checked = kernel_improve.against_fallback(
            Path(s["source"]),
            (best["overlay"], state.get("overlay") or {}),
            fallback,
            state.get("reference") or {},
            s,
            environment,
            ctx.scratch,
        )
    return kernel_improve.judged(record, fallback, checked)


def improve(state: State, ctx: Runtime) -> State:
    """Offer the next kernel call site a verified port runs through a fallback to the
    model, once (``agents.kernel_improve``): the next round verifies its answer, and a
    failing answer leaves the fallback port, the best round, as it was."""
    s = state["settings"]
    fallback = kernel_improve.next_offer(state)
    if fallback is None:
        return {"next_fix": None}
    calls = list((state.get("reference") or {}).get("kernel_site_calls") or [])
    request = kernel_improve.improvement_request(Path(s["source"]), fallback, s["target"], calls)
    site, kind = fallback["site"], fallback["kind"]
    spent = tokens(state.get("llm_usage") or {}) >= s["max_llm_tokens"]
    why_not = (
        "the site is not in the original"
        if request is None
        else "the LLM token budget is spent"
        if spent
        else "no LLM answers"
        if ctx.llm(s) is None
        else ""
    )
    if why_not or request is None:
        logged = decision("improve", "not asked", site=site, kind=kind, why=why_not)
        return {"next_fix": None, "decisions": [logged]}
    ctx.say(f"improving: asking the LLM for a PyTorch version of {site} ({kind})")
    why = f"{site} runs through a fallback ({kind}): verified, slow"
    logged = decision("improve", "PyTorch version asked", site=site, kind=kind, why=why)
    fix: NextFix = {"kind": "improve", "request": request}
    return {"next_fix": fix, "improving": fallback, "decisions": [logged]}


def diagnose(state: State, ctx: Runtime) -> State:
    """Classify the failure and choose the next repair (``agents.repair_choice``); no
    repair left to try ends the loop."""
    s = state["settings"]
    v = state.get("verification") or {}
    found = classify(v.get("failure") or v.get("target") or {}, s["target"]).to_json()
    choice = RepairContext(
        state,
        found,
        tried_fixes(state.get("decisions", [])),
        lambda: ctx.llm(s) is not None,
        ctx.scratch,
    )
    fix = choose_fix(choice)
    why = f"{found.get('signature')}: {found.get('cause')}"
    if not fix:
        limitation = bool(found.get("limitation"))
        why += no_fix_reason(found.get("action"), choice.llm_may_help, limitation)
    ctx.say(f"diagnosis: {why}")
    logged = decision(
        "diagnose",
        fix["kind"] if fix else "stop",
        signature=found.get("signature"),
        file=found.get("file"),
        line=found.get("line"),
        fix=fix["kind"] if fix else None,
        why=why,
    )
    return {"diagnosis": found, "next_fix": fix, "decisions": [logged]}


def deliver(state: State, ctx: Runtime) -> State:
    """Write the migration and its evidence where the user asked (nothing earlier does)."""
    v = state.get("verification")
    outcome = v["verdict"] if v else Verdict.NOT_VERIFIED
    ctx.say("delivering: writing the migration and its evidence")
    written = write_output(state, outcome, ctx.say)
    return {"outcome": outcome, "decisions": [decision("deliver", outcome, **written)]}


# --- the edges --------------------------------------------------------------------------


def after_rewrite(state: State) -> str:
    return "verify" if state["settings"].get("verify", True) else "deliver"


def after_verify(state: State) -> str:
    """Diagnose a failure while rounds and wall time are left; otherwise deliver."""
    v = state.get("verification") or {}
    if v.get("verdict") != Verdict.FAILED:
        return "improve" if kernel_improve.next_offer(state) else "deliver"
    s = state["settings"]
    if state.get("iteration", 0) > s["max_iterations"]:
        return "deliver"
    if state.get("elapsed_s", 0.0) > s["max_wall_s"]:
        return "deliver"
    return "diagnose"


def after_diagnose(state: State) -> str:
    return "rewrite" if state.get("next_fix") else "deliver"


after_improve = after_diagnose  # a chosen fix is applied; no fix: the port as it is


def build(ctx: Runtime) -> StateGraph:
    """The graph, uncompiled; ``compile(checkpointer=...)`` makes it runnable."""
    graph = StateGraph(State)
    for node in (plan, rewrite, verify, improve, diagnose, deliver):
        graph.add_node(node.__name__, _bound(node, ctx))
    graph.add_edge(START, "plan")
    graph.add_edge("plan", "rewrite")
    graph.add_conditional_edges("rewrite", after_rewrite, ["verify", "deliver"])
    graph.add_conditional_edges("verify", after_verify, ["improve", "diagnose", "deliver"])
    graph.add_conditional_edges("improve", after_improve, ["rewrite", "deliver"])
    graph.add_conditional_edges("diagnose", after_diagnose, ["rewrite", "deliver"])
    graph.add_edge("deliver", END)
    return graph


def this_round(state: State, record: VerificationRecord, iteration: int) -> Best:
    """The migration this round verified, ranked so that rounds can be compared."""
    return {
        "overlay": state.get("overlay") or {},
        "agent_edits": state.get("agent_edits") or [],
        "verification": record,
        "rank": verifier.rank(record),
        "iteration": iteration,
    }


def better_of(best: Best | None, candidate: Best) -> Best:
    """The round to keep: the new one unless it ranks below the best so far (a tie goes
    to the new round, which has the later repairs)."""
    if best is not None and candidate["rank"] < best["rank"]:
        return best
    return candidate


def _bound(node: Callable[[State, Runtime], State], ctx: Runtime) -> Callable:
    """The node as langgraph calls it (state only), timed into ``elapsed_s``."""

    def run(state: State) -> State:
        started = time.perf_counter()
        update = node(state, ctx)
        update["elapsed_s"] = time.perf_counter() - started
        return update

    run.__name__ = node.__name__
    return run


# --- running, checkpointing and resuming ------------------------------------------------


@contextmanager
def checkpointed(runtime: Runtime, db: Path | None = None) -> Iterator[Any]:
    """The compiled graph with its SQLite checkpointer open."""
    with open_checkpointer(db or runs.checkpoint_db()) as saver:
        yield build(runtime).compile(checkpointer=saver)


def _config(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}, "recursion_limit": 64}


def start(settings: Mapping[str, Any], runtime: Runtime, db: Path | None = None) -> State:
    """Run a migration from the beginning under ``runtime.run_id``; returns the final state.
    ``settings``: the front door's (cli, batch), which hold keys Settings does not list."""
    full: Settings = {**DEFAULTS, **settings}  # type: ignore[typeddict-item]  # settings' extra keys: run_id, devices, keep_args, configuration
    with checkpointed(runtime, db) as app:
        for update in app.stream(
            {"settings": full},
            _config(runtime.run_id),
            stream_mode="updates",
            durability=DURABILITY,
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
            config = _config(runtime.run_id)
            for update in app.stream(None, config, stream_mode="updates", durability=DURABILITY):
                _announce(runtime, update)
        return _finished(app, runtime.run_id)


def _announce(runtime: Runtime, update: State) -> None:
    for node in update:
        runtime.say(f"{node}: finished")
