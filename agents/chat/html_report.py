"""/report's page: the session's proposal as the HTML report a migration writes.

The same layout (``tools.report.html``) from what the session holds: the originals and the
proposal (undone changes left out), the edits that made it, the plan's items left for a
human at the proposal's lines, and the last /verify (its parts of verification.md and its
plot, as ``agents.deliver`` writes them). Written into the session's folder, never into
the repository; opened in a browser only where there is a display to show it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import webbrowser
from pathlib import Path
from typing import cast

from torchport.tools.findings import is_advisory
from torchport.tools.output.nofollow import write_text
from torchport.tools.report.html import PAGE, Note, ReportPage, Section, render_page
from torchport.tools.report.hunks import split
from torchport.tools.report.linemap import line_map
from torchport.tools.safetext import markdown_code

from ..deliver import plot_files, verification_sections
from ..repair_records import PlanItem
from ..report_page import settings_table
from ..report_record import ReportRecord
from ..state import AgentEdit
from ..verdicts import Verdict
from ..verification_records import VerificationRecord
from .state import ChatState

NOT_VERIFIED = "not verified yet: /verify runs the original and the proposal"


def notes_of(items: list[PlanItem], base: dict[str, str], overlay: dict[str, str]) -> list[Note]:
    """The plan's items for a human, at the proposal's lines (as /report's table)."""
    maps = {rel: line_map(base[rel], overlay[rel]) for rel in overlay if rel in base}
    notes = []
    for m in items:
        path, line = str(m.get("path")), int(m.get("line") or 1)
        kind = "performance advisory" if is_advisory(m.get("category")) else "left for you"
        text = f"{m.get('message', '')} — what to do: {m.get('hint') or 'see the rule'}"
        notes.append(
            Note(path, maps[path](line) if path in maps else line, str(m.get("rule")), kind, text)
        )
    return notes


def _record(state: ChatState, verification: VerificationRecord) -> ReportRecord:
    """The verification in the shape verification.md is written from."""
    return {
        "run_id": state["session_id"],
        "target": state["target"],
        "verdict": verification.get("verdict", Verdict.NOT_VERIFIED),
        "verification": verification,
        "iterations": 1 if verification else 0,
        "plan": state.get("plan"),
        "decisions": [],
        "agent_edits": [
            cast("AgentEdit", e) for e in state.get("edits") or [] if e.get("by") == "llm"
        ],
        "elapsed_s": 0.0,
    }


def session_page(
    state: ChatState, overlay: dict[str, str], items: list[PlanItem], fresh: bool
) -> str:
    """The page of the session's proposal; ``fresh``: the last /verify is of this overlay."""
    base = {rel: text for rel, text in (state.get("base") or {}).items() if rel in overlay}
    v: VerificationRecord = {**(state.get("verification") or {})} if fresh else {}
    record = _record(state, v)
    parts = verification_sections(record) if v else {}
    settings = {
        "target": state["target"],
        "entry": state.get("entry"),
        **(state.get("budget") or {}),
    }
    images = plot_files({"settings": settings, "verification": v}) if v else {}
    facts = [
        f"- repository: {markdown_code(state['source'])}; "
        f"session {markdown_code(state['session_id'])}",
        f"- {len(overlay)} files changed by the proposal; nothing is written to the repository "
        "until /apply",
    ]
    later = [Section("plots", "Losses", "\n".join(parts["losses"]))] if parts.get("losses") else []
    if parts.get("divergence"):
        later.append(Section("divergence", "First divergence", "\n".join(parts["divergence"])))
    if parts.get("timing"):
        later.append(Section("timing", "Timing", "\n".join(parts["timing"])))
    page = ReportPage(
        title=Path(state["source"]).name,
        target=state["target"],
        verdict=str(v.get("verdict") or Verdict.NOT_VERIFIED),
        reason=str(v.get("reason") or NOT_VERIFIED),
        lead=[
            Section("run", "The session", "\n".join(facts)),
            Section("sandbox", "Settings", "\n".join(settings_table(settings))),
        ],
        before=base,
        after=overlay,
        hunks=split(base, overlay, state.get("edits") or []),
        notes=notes_of(items, base, overlay),
        sections=later,
        images=images,
    )
    return render_page(page)


def write_page(folder: Path, page: str) -> Path:
    """Write the page into the session's folder; open it where a browser can show it."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text(folder, PAGE, page)
    path = folder / PAGE
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform == "darwin":
        with contextlib.suppress(webbrowser.Error):  # the path is printed either way
            webbrowser.open(path.as_uri())
    return path
