"""A chat session's state (checkpointed after every command) and what it cannot hold."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from torchport.tools.report.hunks import Change
from torchport.tools.scanner import ScanOptions

from .. import runs
from ..run_record import RunRecord
from ..state import PlanRecord, scan_filters
from ..verification_records import VerificationRecord
from . import changes as ch


class ChatState(TypedDict, total=False):
    session_id: str
    source: str
    target: str
    llm: str
    # steps, timeout_s, memory_mb, isolation, deps, tolerance, and the files and rules the
    # session leaves alone (exclude, skip: ``state.scan_filters``)
    budget: dict[str, Any]
    entry: str | None  # how /verify runs the program (--entry, /verify CMD); None: the planner's
    command: dict[str, str]  # the latest, parsed
    plan: PlanRecord | None
    base: dict[str, str]  # original text of each file the proposal changes
    proposal: dict[str, str]  # proposed text of each changed file
    changes: list[Change]
    edits: list[dict[str, Any]]  # what made the proposal (codemod and LLM edits), for /diff
    undone: list[int]
    # Rule codes the person took back by code ("leave the profiler alone"): a later
    # /migrate proposes their changes already undone.
    kept_back: list[str]
    verification: VerificationRecord | None
    verified: str | None  # digest of the overlay the verification is about
    reference: RunRecord | None  # the original's run (target independent)
    reference_of: str | None  # the command and budget it ran with (``run_key``)
    greeted: bool  # the session's banner was shown (a resumed session prints its own)
    applied: list[dict[str, Any]]
    llm_usage: dict[str, float]  # llm.client.Usage.to_json: calls, tokens, retries, seconds


@dataclass
class ChatRuntime:
    """What the session needs but its checkpoint cannot hold: the LLM client."""

    session_id: str
    llm_factory: Callable[[Mapping[str, Any]], Any] | None = None
    llm_flag: str | None = None  # --llm given on --resume: overrides the session's own
    _client: Any = field(default=None, repr=False)
    _resolved: bool = False

    def has_llm(self, flag: str) -> bool:
        """Whether an LLM is configured, without starting one (the embedded model takes
        a while): what /help and the parser offer depends on it."""
        if self._resolved or self.llm_factory is None:
            return self._client is not None
        from ..llm.config import LLMConfigError, resolve

        try:
            return resolve(self.llm_flag or flag, os.environ) is not None
        except LLMConfigError:
            return True  # configured, wrongly: using it says why

    def llm(self, flag: str) -> Any:
        flag = self.llm_flag or flag
        if not self._resolved:
            self._resolved = True
            if self.llm_factory is not None and flag != "none":
                self._client = self.llm_factory({"llm": flag})
        return self._client

    @property
    def scratch(self) -> Path:
        return runs.run_dir(f"chat-{self.session_id}")


def scan_options(state: ChatState) -> ScanOptions:
    """What the session's scans read: its target, less the files and rules it leaves alone."""
    left_alone = scan_filters(state.get("budget") or {})
    return ScanOptions(
        target=state["target"], skip=left_alone["skip"], exclude=left_alone["exclude"]
    )


def overlay_of(state: ChatState) -> dict[str, str]:
    return ch.current(
        state.get("base") or {},
        state.get("proposal") or {},
        state.get("changes") or [],
        set(state.get("undone") or []),
    )


def digest(overlay: dict[str, str]) -> str:
    """Which proposal a verification is about: stale once the proposal changes."""
    return hashlib.sha256(json.dumps(overlay, sort_keys=True).encode()).hexdigest()[:16]


def run_key(entry: list[str] | None, budget: dict[str, Any]) -> str:
    """Which runs a reference is good for: the original's numbers depend on its command
    and budget (and on its files, which the verifier's own cache checks)."""
    return hashlib.sha256(json.dumps([entry, budget], sort_keys=True).encode()).hexdigest()[:16]


def new_state(
    session_id: str,
    source: Path,
    target: str,
    llm: str,
    budget: dict[str, Any],
    entry: str | None = None,
) -> ChatState:
    return {
        "session_id": session_id,
        "source": str(source),
        "target": target,
        "llm": llm,
        "budget": budget,
        "entry": entry,
        "command": {"name": "none"},
        "changes": [],
        "undone": [],
        "kept_back": [],
        "applied": [],
        "llm_usage": {},
    }
