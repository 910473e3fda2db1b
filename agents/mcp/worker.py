"""One long MCP call in a process of its own: ``python -m torchport.agents.mcp.worker``.

The server writes one job (JSON) on the worker's standard input and reads JSON lines back:
``{"progress": TEXT}`` while it works, then ``{"result": ...}`` or ``{"error": TEXT}``.
A process, not a thread, because a call can be cancelled: the server kills the worker's
process group, and each sandboxed run of it dies with it (the sandbox's watchdog is tied
to the thread that started the run), so nothing of a cancelled verification lives on.
The jobs are the entry points the CLI and chat already use: chat's ``propose``, the
verifier's ``verify_overlay`` and the sandbox harness's ``run``; the user's code runs
only inside the sandbox they start.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Say = Callable[[str], None]


def migrate_job(job: dict[str, Any], say: Say) -> dict[str, Any]:
    """The proposal chat's /migrate makes: base and proposed texts, numbered changes."""
    from ..chat.proposal import propose
    from ..llm.factory import llm_factory

    source = Path(job["source"])
    options = job.get("options")  # the repository's entry and the files and rules it leaves
    return propose(source, job["target"], job["llm"], job["run_id"], say, llm_factory(say), options)


def verify_job(job: dict[str, Any], say: Say) -> dict[str, Any]:
    """The verification chat's /verify runs: of a proposal (``overlay``), or of the working
    tree as it is against its last commit (``working_tree``)."""
    from torchport.tools.scanner import ScanOptions, scan

    from ..planner import make_plan
    from ..state import scan_filters
    from ..verify_step import verify_overlay
    from .worktree import Original, original_of

    source, target, scratch = Path(job["source"]), job["target"], Path(job["scratch"])
    if job.get("working_tree"):
        original = original_of(source, scratch)
    else:
        original = Original(source, job["overlay"], "the proposal against the repository")
    filters = scan_filters(job["settings"])
    options = ScanOptions(target=target, skip=filters["skip"], exclude=filters["exclude"])
    found = scan(original.source, options)
    said = job.get("entry_from", "given with --entry")
    plan = make_plan(original.source, found, target, job.get("entry"), said).to_json()
    say(f"verifying {original.compared}")
    outcome = verify_overlay(
        original.source, original.overlay, plan, target, job["settings"], scratch, say
    )
    verified = {
        "compared": original.compared,
        "entry": plan.get("entry"),
        "verification": outcome.verification.to_json(),
    }
    if outcome.overlay is not None:  # judged with lines repaired that what it compared lacks
        verified["repaired_beyond_it"] = [
            f"{path}:{line}: {after.strip()}"
            for r in outcome.verification.legacy_repairs
            for path, line, _, after in r.get("port_lines") or ()
        ]
    return verified


def run_job(job: dict[str, Any], say: Say) -> dict[str, Any]:
    """One program in the sandbox, as ``torchport run`` runs it."""
    from torchport.sandbox.harness import RunSpec, run

    budget = job["budget"]

    def step(event: dict[str, Any]) -> None:
        loss = event.get("loss")
        shown = f", loss {loss:.5g}" if isinstance(loss, float) else ""
        say(f"running: step {event.get('step')}/{budget['steps']}{shown}")

    spec = RunSpec(
        root=Path(job["root"]),
        command=job["command"],
        mode=job["mode"],
        steps=budget["steps"],
        forwards=budget["steps"],
        seed=job["seed"],
        devices=budget["devices"],
        timeout_s=budget["timeout_s"],
        memory_mb=budget["memory_mb"],
        isolation=budget["isolation"],
        progress=step,
        lower_args=not budget.get("keep_args", False),
    )
    return run(spec).to_json()


JOBS: dict[str, Callable[[dict[str, Any], Say], dict[str, Any]]] = {
    "migrate": migrate_job,
    "verify": verify_job,
    "run": run_job,
}


def main() -> int:
    """Read the job, answer on the original standard output; anything else that writes
    to standard output (a library's print) goes to standard error instead."""
    from torchport.sandbox.isolation import hide_own_secrets

    hide_own_secrets()  # as every torchport process does first: no run can read our keys
    wire = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    lock = threading.Lock()

    def send(message: dict[str, Any]) -> None:
        with lock:  # progress comes from the runs' watcher threads too
            wire.write(json.dumps(message, default=str) + "\n")
            wire.flush()

    job = json.loads(sys.stdin.read())
    try:
        result = JOBS[job["kind"]](job, lambda text: send({"progress": text}))
    except Exception as exc:  # the server turns it into the tool's error
        send({"error": _error_text(exc)})
        return 1
    send({"result": result})
    return 0


def _error_text(exc: Exception) -> str:
    """The message of an error torchport raises on purpose; the type too otherwise."""
    from torchport.sandbox.harness import RunError
    from torchport.tools.migrate import MigrateError

    from ..graph import GraphError
    from ..llm.factory import LLMSetupError

    if isinstance(exc, RunError | MigrateError | GraphError | LLMSetupError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
