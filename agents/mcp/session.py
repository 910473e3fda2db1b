"""What one MCP server holds while it lives: its repository and settings, the proposals
``migrate`` made (by id), the last report, and ``apply``, the one call that writes.

``apply`` writes with chat's own code (``chat.proposal.write_proposal``: each original
backed up first, atomic replacement, never through a symlink) after the same checks as
chat's /apply (nothing changed on disk since the proposal was made) and one more that
``torchport migrate --in-place`` makes: a git checkout with a clean tree, so the change
can be seen and undone with git (``force`` writes anyway; the backups are made either way).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchport.tools.gitsafe import Git
from torchport.tools.report.hunks import Change

from .. import runs
from ..chat import changes as ch
from ..chat.proposal import stale_files, write_proposal
from ..chat.state import digest
from ..verdicts import Verdict
from .confine import confined_file


class Refused(ValueError):
    """A call that cannot be done as asked; its message says why and what to do instead."""


@dataclass
class Proposal:
    """A migration proposed and not written: chat's session state for one /migrate."""

    id: str
    target: str
    base: dict[str, str]
    proposal: dict[str, str]
    changes: list[Change]
    totals: dict[str, Any]
    verification: dict[str, Any] | None = None
    verified: str | None = None  # digest of the overlay the verification is about

    def overlay(self, keep: list[int] | None = None) -> dict[str, str]:
        """The proposed files with only the changes ``keep`` (every change by default)."""
        ids = {c["id"] for c in self.changes}
        unknown = sorted(set(keep or ()) - ids)
        if unknown:
            raise Refused(f"no change {unknown} in proposal {self.id} (its changes: 1-{len(ids)})")
        undone = set() if keep is None else ids - set(keep)
        return ch.current(self.base, self.proposal, self.changes, undone)

    def status(self, overlay: dict[str, str]) -> str:
        """What is known of ``overlay``: the verdict of its verification, or that none ran."""
        if self.verification and self.verified == digest(overlay):
            return str(self.verification.get("verdict"))
        return Verdict.NOT_VERIFIED


@dataclass
class Session:
    repo: Path
    settings: dict[str, Any]  # the run budget and --llm the server was started with
    id: str = field(default_factory=runs.new_run_id)
    proposals: dict[str, Proposal] = field(default_factory=dict)
    applied: dict[str, str] = field(default_factory=dict)  # proposal id -> backup folder
    last_report: dict[str, Any] | None = None

    @property
    def scratch(self) -> Path:
        """The server's own folder under $TORCHPORT_HOME: verifications, apply's backups."""
        return runs.run_dir(f"mcp-{self.id}")

    def add(self, target: str, made: dict[str, Any]) -> Proposal:
        pid = f"p-{secrets.token_hex(4)}"
        self.proposals[pid] = Proposal(
            pid, target, made["base"], made["proposal"], made["changes"], made["totals"]
        )
        return self.proposals[pid]

    def get(self, pid: str) -> Proposal:
        if pid in self.applied:
            raise Refused(f"proposal {pid} was applied already (backups: {self.applied[pid]})")
        if pid not in self.proposals:
            known = ", ".join(self.proposals) or "none yet; call migrate"
            raise Refused(f"no proposal {pid!r} in this server (known: {known})")
        return self.proposals[pid]

    def apply(
        self,
        pid: str,
        confirm: bool,
        keep: list[int] | None = None,
        files: list[str] | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Write proposal ``pid`` (only ``keep`` of its changes, only ``files``) when
        ``confirm``; refuse otherwise, saying what would be written."""
        chosen = self._files(files)  # a path outside the repository is refused first
        proposal = self.get(pid)
        overlay = _only(proposal.overlay(keep), chosen)
        if not overlay:
            raise Refused("nothing to apply: the changes chosen change no file")
        status = proposal.status(overlay)
        what = f"{len(overlay)} files ({', '.join(sorted(overlay))}); verification: {status}"
        if not confirm:
            raise Refused(f"not applied: this would write {what}. Call apply with confirm: true.")
        if not force:
            check_clean(self.repo)
        stale = stale_files(self.repo, proposal.base, overlay)
        if stale:
            raise Refused(f"not applied: changed on disk since migrate: {', '.join(stale)}")
        backup = self.scratch / f"backup-{len(self.applied) + 1}"
        written, refused = write_proposal(self.repo, proposal.base, overlay, backup)
        self.applied[pid] = str(backup)
        del self.proposals[pid]
        return {
            "applied": bool(written),
            "files": written,
            "refused": refused,
            "backup": str(backup),
            "verification": status,
        }

    def _files(self, files: list[str] | None) -> set[str] | None:
        return None if files is None else {confined_file(self.repo, f) for f in files}


def _only(overlay: dict[str, str], files: set[str] | None) -> dict[str, str]:
    if files is None:
        return overlay
    missing = sorted(files - set(overlay))
    if missing:
        raise Refused(f"the proposal changes no file {', '.join(missing)}")
    return {rel: text for rel, text in overlay.items() if rel in files}


def check_clean(repo: Path) -> None:
    """Refuse a folder outside git, or one with uncommitted changes to tracked files."""
    git = Git(repo)
    inside = git.run("rev-parse", "--is-inside-work-tree", check=False).stdout.strip()
    if inside != b"true":
        raise Refused(
            f"not applied: {repo} is not a git repository; apply writes into a git checkout "
            "with a clean tree (force: true writes anyway; the originals are backed up)"
        )
    if git.text("status", "--porcelain", "--untracked-files=no", "--", "."):
        raise Refused(
            f"not applied: {repo} has uncommitted changes; commit or stash them first "
            "(force: true writes anyway; the originals are backed up)"
        )
