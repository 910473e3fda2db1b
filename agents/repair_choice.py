"""How the loop chooses its next repair after a failed verification.

The choices are tried in order, cheapest and most certain first: revisit an LLM edit
when a failure has no frame to point at (a parity failure), re-run catalogue rules the
diagnosis names, have the LLM fix the catalogue constructs a missing CUDA-only library
still leaves, ask the LLM about the failure's frame. Each choice is a small function
of a ``RepairContext``; one that does not apply returns None. A choice already made for
the same failure at the same place is not made again, so the loop always ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchport.tools.catalogue import load_catalogue

from . import kernel_lane, rewriter
from .state import DiagnosisRecord, NextFix, State, scan_filters

Tried = set[tuple[Any, Any, Any, Any]]


@dataclass
class RepairContext:
    """What every choice may look at; ``found`` is the diagnosis, which a revisit of an
    LLM edit points at that edit (a parity failure has no frame of its own)."""

    state: State
    found: DiagnosisRecord
    tried: Tried
    llm_available: Callable[[], bool]  # asked lazily: the local model starts only if needed
    scratch: Path

    @property
    def key(self) -> tuple[Any, Any, Any]:
        return (self.found.get("signature"), self.found.get("file"), self.found.get("line"))

    def untried(self, kind: str) -> bool:
        return (*self.key, kind) not in self.tried

    @property
    def llm_may_help(self) -> bool:
        return self.found.get("action") in ("rules", "llm") and self.llm_available()


def tried_fixes(decisions: list[dict[str, Any]]) -> Tried:
    """The (signature, file, line, fix) of every earlier diagnosis, from the decision log."""
    return {
        (d.get("signature"), d.get("file"), d.get("line"), d.get("fix"))
        for d in decisions
        if d.get("node") == "diagnose"
    }


def revisit_kernel_site(c: RepairContext) -> NextFix | None:
    """A kernel replacement the differential check failed: the LLM's replacement goes back
    to it with the evidence (the site, the inputs, the worst difference), the kernel's
    source and the original's launch code."""
    if c.found.get("signature") != "kernel-mismatch" or not c.untried("llm"):
        return None
    if not c.llm_available():
        return None
    request = kernel_lane.mismatch_request(c.state, c.found)
    return {"kind": "llm", "request": request} if request is not None else None


def revisit_llm_edit(c: RepairContext) -> NextFix | None:
    """A failure with no frame (parity): the LLM's own edits are the likeliest cause;
    each is revisited once, newest first, with the text it replaced."""
    state = c.state
    if c.found.get("file") or not state.get("agent_edits") or not c.llm_available():
        return None
    overlay = state.get("overlay") or {}
    verification = state.get("verification") or {}
    for edit in reversed(state["agent_edits"]):
        request = rewriter.edit_request(edit, overlay, verification, state["settings"]["target"])
        if request is None:
            continue
        line = request["start_line"]
        if (c.found.get("signature"), edit["path"], line, "llm") not in c.tried:
            c.found["file"], c.found["line"] = edit["path"], line
            c.found["cause"] = f"{c.found.get('cause')}; revisiting the LLM's edit there"
            return {"kind": "llm", "request": request}
    return None


def rerun_rules(c: RepairContext) -> NextFix | None:
    """Rules the diagnosis names, within the user's --rules, when they change something;
    the changed files travel with the fix, so rewrite applies them without recomputing."""
    s = c.state["settings"]
    rules = allowed_rules(c.found.get("rules") or [], s.get("select") or [])
    if c.found.get("action") != "rules" or not rules or not c.untried("rules"):
        return None
    overlay = c.state.get("overlay") or {}
    updated = rewriter.apply_rules(
        Path(s["source"]), overlay, c.scratch / "rules", s["target"], rules, scan_filters(s)
    )
    changed = {k: v for k, v in updated.items() if overlay.get(k) != v}
    return {"kind": "rules", "rules": rules, "files": changed} if changed else None


def fix_remaining_constructs(c: RepairContext) -> NextFix | None:
    """A CUDA-only library still imported: its remaining uses are catalogue constructs;
    fixing those (and dropping the then unused import) is the repair."""
    missing_library = str(c.found.get("signature", "")).startswith("missing-")
    if not (missing_library and c.llm_may_help and c.untried("constructs")):
        return None
    s = c.state["settings"]
    remaining = rewriter.llm_constructs(
        Path(s["source"]), c.state.get("overlay") or {}, c.scratch / "scan", s
    )
    return {"kind": "constructs", "items": len(remaining)} if remaining else None


def ask_llm_about_failure(c: RepairContext) -> NextFix | None:
    """The failure's own frame, sent to the LLM with the error."""
    if not c.llm_may_help or not c.untried("llm"):
        return None
    verification = c.state.get("verification") or {}
    request = rewriter.failure_request(c.found, verification, c.state["settings"]["target"])
    return {"kind": "llm", "request": request} if request is not None else None


CHOICES: tuple[Callable[[RepairContext], NextFix | None], ...] = (
    revisit_kernel_site,
    revisit_llm_edit,
    rerun_rules,
    fix_remaining_constructs,
    ask_llm_about_failure,
)


def choose_fix(c: RepairContext) -> NextFix | None:
    """The first choice that applies, or None: the loop stops and reports."""
    for choice in CHOICES:
        fix = choice(c)
        if fix is not None:
            return fix
    return None


def allowed_rules(rules: list[str], select: list[str]) -> list[str]:
    """The diagnosis's rules, within the user's --rules selection if there is one."""
    if not select:
        return list(rules)
    chosen = {r.code for r in load_catalogue().select(select)}
    return [r for r in rules if r in chosen]


def no_fix_reason(action: str | None, has_llm: bool, limitation: bool = False) -> str:
    """Why the loop stops here; a cause in torchport's own sandbox or emulator is said to
    be one, so a reader does not go looking for a fix in the port."""
    if action == "human":
        if limitation:
            return " (a limitation of torchport's sandbox or emulator, not of the port)"
        return " (needs a human: no change to the code fixes it)"
    if not has_llm:
        return " (no deterministic fix; no LLM configured, see --llm)"
    return " (already tried; nothing new to try)"
