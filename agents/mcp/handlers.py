"""The server's tools, each a thin call into what the CLI and chat already use.

Only ``apply`` writes to the repository, and only when its call says ``confirm: true``.
``scan``, ``explain_rule`` and ``plan`` read; ``migrate`` proposes (its diff and numbered
changes are kept in the server under a proposal id); ``verify`` and ``run`` run programs,
in the sandbox only, from scratch copies. Long calls (``migrate``, ``verify``, ``run``)
run in a worker process (``jobs``): they send progress notifications and a cancelled
one leaves nothing running.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field
from torchport.sandbox.limits import MAX_SEED
from torchport.sandbox.modes import EMULATED
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.filenames import printable_data
from torchport.tools.report.json_report import scan_to_dict
from torchport.tools.scanner import ScanError, ScanOptions, scan

from .. import config_record
from ..chat import changes as ch
from ..chat.state import digest
from ..planner import make_plan
from ..state import scan_filters
from .confine import OutsideRepository, confined
from .jobs import JobFailed, run_job
from .resources import rule_summary
from .session import Refused, Session

Target = Literal[TARGETS]  # type: ignore[valid-type]  # the catalogue's targets, which pydantic reads at run time
ProjectTarget = Annotated[
    Target | None, Field(description="default: the repository's [tool.torchport] target")
]
RunTarget = Literal[(*EMULATED, "accelerator")]  # type: ignore[valid-type]  # the same
Steps = Annotated[
    int | None, Field(ge=1, description="optimizer steps per run (default: the server's --steps)")
]
Entry = Annotated[
    str | None,
    Field(description='how to run the program, e.g. "python train.py --epochs 1" (default: found)'),
]
READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True)


@contextmanager
def told() -> Iterator[None]:
    """torchport's own refusals and failures as the tool's error, the message as it is."""
    try:
        yield
    except (OutsideRepository, Refused, JobFailed, ScanError) as exc:
        raise ToolError(str(exc)) from None


def progress_of(ctx: Context) -> Callable[[str], Awaitable[None]]:
    """Each message of a long call as one MCP progress notification (numbered from 1)."""
    count = 0

    async def report(message: str) -> None:
        nonlocal count
        count += 1
        await ctx.report_progress(count, None, message)

    return report


class Tools:
    """The tools of one server, bound to its session (repository, settings, proposals)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.calls = 0

    def register(self, server: MCPServer) -> None:
        server.add_tool(self.scan, annotations=READS)
        server.add_tool(self.explain_rule, annotations=READS)
        server.add_tool(self.plan, annotations=READS)
        server.add_tool(self.migrate, annotations=READS)
        server.add_tool(self.verify, annotations=RUNS)
        server.add_tool(self.apply, annotations=ToolAnnotations(destructive_hint=False))
        server.add_tool(self.run, annotations=RUNS)

    async def scan(
        self,
        path: Annotated[str, Field(description="a folder or file of the repository")] = ".",
        target: Target | None = None,
        select: Annotated[list[str] | None, Field(description="rule codes or prefixes")] = None,
    ) -> dict[str, Any]:
        """Every CUDA-specific construct under PATH: file, line, rule, and how each target
        fixes it (only what TARGET needs when given). The paths in the answer are relative to
        its root (PATH, or the folder of a file PATH). Writes nothing."""
        with told():
            root, rel = confined(self.session.repo, path)
            if select and not load_catalogue().select(select):
                raise Refused(f"select {select} matches no rule")
            filters = scan_filters(self.session.settings)
            options = ScanOptions(
                target=target,
                select=tuple(select or ()),
                skip=filters["skip"],
                exclude=filters["exclude"],
            )
            found = await anyio.to_thread.run_sync(lambda: scan(root, options))
        return {"path": rel, **printable_data({**scan_to_dict(found), **self._configuration()})}

    async def explain_rule(
        self, code: Annotated[str, Field(description="a rule code (TPD001) or name")]
    ) -> dict[str, Any]:
        """A rule's documentation (what, why, example, fix safety) and its fix per target;
        each is also the resource torchport://rules/CODE."""
        rule = load_catalogue().get(code.strip()) or load_catalogue().get(code.strip().upper())
        if rule is None:
            raise ToolError(f"no rule {code!r}; the resources torchport://rules/CODE list them")
        return rule_summary(rule)

    async def plan(self, target: ProjectTarget = None, entry: Entry = None) -> dict[str, Any]:
        """What the planner would do for TARGET: the entry command a verification runs (or
        why none can run), how many constructs are fixed automatically, and which need an
        LLM or a person (rule, file, line, what to do). Writes nothing."""
        s = self.session

        def planned(chosen: str) -> dict[str, Any]:
            filters = scan_filters(s.settings)
            options = ScanOptions(target=chosen, skip=filters["skip"], exclude=filters["exclude"])
            found = scan(s.repo, options)
            said = config_record.entry_reason(s.settings, given_here=bool(entry))
            made = make_plan(s.repo, found, chosen, entry or s.settings.get("entry"), said)
            return {**made.to_json(), **self._configuration()}

        with told():
            chosen = self._target(target)
            return printable_data(await anyio.to_thread.run_sync(planned, chosen))

    def _configuration(self) -> dict[str, Any]:
        """What every answer says about the settings: the repository's configuration file
        applied (or none), each value that is not the default and where it came from."""
        kept = self.session.settings.get(config_record.KEY) or {}
        return {"configuration": {**kept, "summary": config_record.summary(kept)}}

    def _target(self, target: str | None) -> str:
        """The call's target, else the repository's configured one."""
        chosen = target or self.session.settings.get("target")
        if chosen is None:
            raise Refused(
                "no target: give one, or set `target` in the repository's [tool.torchport]"
            )
        return chosen

    async def migrate(self, ctx: Context, target: ProjectTarget = None) -> dict[str, Any]:
        """Propose the migration of the repository to TARGET: a unified diff and its
        changes, numbered (id, file, line, which rule or the LLM made it), kept in this server
        under the proposal id returned. Writes NOTHING to the repository: verify the proposal
        with verify, write it with apply."""
        s = self.session
        with told():
            target = self._target(target)
            job: dict[str, Any] = {"kind": "migrate", "source": str(s.repo), "target": target}
            job.update(llm=s.settings.get("llm", "none"), run_id=f"mcp-{s.id}")
            job["options"] = {"entry": s.settings.get("entry"), **scan_filters(s.settings)}
            made = await run_job(job, progress_of(ctx))
        p = s.add(target, made)
        changes = [
            {
                "id": c["id"],
                "path": c["path"],
                "line": c["span"][0] + 1,
                "by": c["by"],
                "rules": c.get("rules") or [],
                "reasons": c.get("reasons") or [],
                "diff": ch.hunk(p.base, p.proposal, c),
            }
            for c in p.changes
        ]
        answer = {
            **self._configuration(),
            "proposal_id": p.id,
            "target": target,
            "files": sorted(p.proposal),
            "changes": changes,
            "diff": ch.diff(p.base, p.proposal),
            "left_for_a_person": p.totals.get("left", 0),
            "advisories": p.totals.get("advisory", 0),
            "written": False,
        }
        s.last_report = {"kind": "migrate", **{k: v for k, v in answer.items() if k != "diff"}}
        return printable_data(answer)

    async def verify(
        self,
        ctx: Context,
        proposal_id: Annotated[
            str | None, Field(description="a proposal of migrate; none: the working tree")
        ] = None,
        target: Annotated[
            Target | None,
            Field(description="the working tree's (default: the repository's configured one)"),
        ] = None,
        changes: Annotated[
            list[int] | None, Field(description="only these change ids of the proposal")
        ] = None,
        steps: Steps = None,
        entry: Entry = None,
    ) -> dict[str, Any]:
        """Run the sandboxed verification: the original on the CUDA reference shim, the port
        on the emulated TARGET device, their losses compared. Of a proposal (PROPOSAL_ID,
        optionally only some CHANGES), or, without one, of the working tree as it is against
        its last commit. Returns the verdict (verified, ran, failed, not-runnable), the
        reason and the evidence. Sends progress notifications; can be cancelled."""
        s = self.session
        with told():
            job = self._verification(proposal_id, target, changes)
            self.calls += 1
            scratch = s.scratch / f"verify-{self.calls}"
            job.update(source=str(s.repo), scratch=str(scratch))
            job["entry"] = entry or s.settings.get("entry")
            job["entry_from"] = config_record.entry_reason(s.settings, given_here=bool(entry))
            job["settings"] = dict(s.settings)
            if steps:  # the caller's: a verdict under fewer steps than torchport's says so
                job["settings"] = config_record.given(s.settings, "steps", steps, "verify's steps")
            try:
                done = await run_job(job, progress_of(ctx))
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(shutil.rmtree, scratch, True)
        record = done["verification"]
        p = s.proposals.get(proposal_id or "")
        if p is not None:  # still there: not applied while it was verified
            p.verification = record
            # verified as it is, unless judged with repaired lines it lacks (legacy-torch)
            p.verified = None if "repaired_beyond_it" in done else digest(job["overlay"])
        s.last_report = {"kind": "verify", "proposal_id": proposal_id, **done}
        answer = {"verdict": record["verdict"], "reason": record["reason"], **done}
        answer.update(self._configuration())
        return printable_data(answer)

    def _verification(
        self, pid: str | None, target: str | None, keep: list[int] | None
    ) -> dict[str, Any]:
        """The verify job's what: a proposal's overlay and target, or the working tree."""
        if pid is None:
            target = target or self.session.settings.get("target")
            if target is None:
                raise Refused("verify needs a proposal_id, or a target for the working tree")
            if keep is not None:
                raise Refused("changes selects changes of a proposal: give its proposal_id")
            return {"kind": "verify", "target": target, "working_tree": True}
        p = self.session.get(pid)
        if target not in (None, p.target):
            raise Refused(f"proposal {pid} is for {p.target}, not {target}")
        return {"kind": "verify", "target": p.target, "overlay": p.overlay(keep)}

    async def apply(
        self,
        proposal_id: str,
        confirm: Annotated[
            bool,
            Field(strict=True, description="true writes; false only says what would be written"),
        ] = False,
        changes: Annotated[list[int] | None, Field(description="only these change ids")] = None,
        files: Annotated[list[str] | None, Field(description="only these files")] = None,
        force: Annotated[bool, Field(description="write into a dirty or non-git tree")] = False,
    ) -> dict[str, Any]:
        """Write a proposal into the repository: the ONLY tool that writes, and only with
        confirm: true. The same checks as torchport chat's /apply: refused when a file
        changed on disk since migrate, or (unless force) when the repository is not a git
        checkout with a clean tree; each original is backed up first (the backup folder is
        returned) and each file replaced atomically, never through a symlink."""
        with told():
            return self.session.apply(proposal_id, confirm, changes, files, force)

    async def run(
        self,
        ctx: Context,
        command: Annotated[
            list[str], Field(min_length=1, description='e.g. ["python", "train.py", "--lr", "0.1"]')
        ],
        target: Annotated[RunTarget | None, Field(description="the emulated device")] = None,
        reference: Annotated[bool, Field(description="the CUDA reference shim instead")] = False,
        root: Annotated[str, Field(description="the program's folder in the repository")] = ".",
        steps: Steps = None,
        seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0,
    ) -> dict[str, Any]:
        """Run a program in the sandbox, from a scratch copy of ROOT: on the emulated TARGET
        device, on the CUDA reference shim (REFERENCE), or on plain CPU torch (neither),
        stopped after STEPS optimizer steps. Returns its status, losses, counters (leftover
        CUDA calls, host syncs, transfers) and error. Sends progress; can be cancelled."""
        s = self.session
        with told():
            if target and reference:
                raise Refused("give target or reference, not both")
            folder, _ = confined(s.repo, root)
            if not folder.is_dir():
                raise Refused(f"{root} is not a folder of the repository")
            mode = "reference" if reference else (target if target in EMULATED else "plain")
            budget = {**s.settings, **({"steps": steps} if steps else {})}
            job = {"kind": "run", "root": str(folder), "command": command, "mode": mode}
            job.update(seed=seed, budget=budget)
            return printable_data(await run_job(job, progress_of(ctx)))


def register(server: MCPServer, session: Session) -> Tools:
    tools = Tools(session)
    tools.register(server)
    return tools
