"""How each evaluated mode migrates a task, and how every result is verified the same way.

``rules`` and ``rules+llm`` run torchport's own agent graph (the LLM is the one
``--llm auto`` finds: ``TORCHPORT_LLM_BASE_URL``, else the embedded model); ``llm`` asks the model
to port each CUDA statement with no catalogue (its hints and codemods withheld);
``naive`` replaces the text ``cuda`` with the target's name; ``shim`` edits
nothing and patches torch at run time (``evals.transfer``), as vendor GPU-migration
toolkits do. Whatever a mode produced is verified by the same verifier against
the same reference run, so verdicts are comparable across modes.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchport.agents import verifier
from torchport.agents.reference_runs import RunLimits
from torchport.agents.repair_records import RepairRequestRecord
from torchport.agents.verdicts import Reason, Verdict
from torchport.agents.verification_records import VerificationRecord
from torchport.sandbox import astparse
from torchport.sandbox.modes import EMULATED

from .tasks import Task

_COPY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "torchport-report")


@dataclass
class Migration:
    """What a mode produced: a migrated tree and how it got there."""

    output: Path
    verification: Mapping[str, Any]
    preload: tuple[str, ...] = ()
    llm: dict[str, Any] = field(default_factory=dict)
    iterations: int = 0
    report: str | None = None


def verify_tree(
    task: Task, tree: Path, target: str, limits: RunLimits, cache: Path, preload: tuple = ()
) -> VerificationRecord:
    """The verifier's verdict for a migrated tree, against the task's original."""
    verification, _ = verifier.verify_tree(
        task.repo, tree, list(task.entry), target, limits, cache, preload
    )
    return verification.to_json()


def _copy(task: Task, out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(task.repo, out, symlinks=True, ignore=_COPY_IGNORE)
    return out


def agent_graph(llm: str) -> Callable[..., Migration]:
    def migrate(task: Task, target: str, out: Path, limits: RunLimits, cache: Path) -> Migration:
        from torchport.agents import graph, runs
        from torchport.agents.llm.factory import llm_factory

        runtime = graph.Runtime(runs.new_run_id(), llm_factory=llm_factory(lambda m: None))
        settings = {
            "source": str(task.repo),
            "target": target,
            "out": str(out),
            "force": True,
            "entry": " ".join(task.entry),
            "llm": llm,
            "steps": limits.steps,
            "timeout_s": limits.timeout_s,
            "isolation": limits.isolation,
        }
        final = graph.start(settings, runtime)
        verification = final.get("verification") or {"verdict": Verdict.NOT_RUNNABLE}
        return Migration(
            output=out,
            verification=verification,
            llm=dict(final.get("llm_usage") or {}),
            iterations=int(final.get("iteration", 0)),
            report=str(out / "torchport-report" / "verification.md"),
        )

    return migrate


def naive(task: Task, target: str, out: Path, limits: RunLimits, cache: Path) -> Migration:
    """Every ``cuda`` in Python text becomes the target's name; nothing else."""
    name = {"accelerator": "cpu"}.get(target, target)
    _copy(task, out)
    for path in [*out.rglob("*.py"), *out.rglob("*.ipynb")]:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = re.sub(r"cuda", name, text)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
    return Migration(out, verify_tree(task, out, target, limits, cache))


TRANSFER = ("torchport.evals.transfer",)


def shim(task: Task, target: str, out: Path, limits: RunLimits, cache: Path) -> Migration:
    """No edits; torch is patched at run time to send CUDA calls to the device."""
    _copy(task, out)
    if target not in EMULATED:
        reason = f"the runtime shim needs an emulated device; {target} has none"
        verification = verifier.Verification(
            Verdict.NOT_RUNNABLE, reason, code=Reason.SHIM_NEEDS_DEVICE
        ).to_json()
        return Migration(out, verification, TRANSFER)
    return Migration(out, verify_tree(task, out, target, limits, cache, TRANSFER), TRANSFER)


def llm_only(task: Task, target: str, out: Path, limits: RunLimits, cache: Path) -> Migration:
    """The model ports each statement that mentions CUDA, with no catalogue help."""
    import ast

    from torchport.agents import rewriter
    from torchport.agents.llm.factory import llm_factory

    client = llm_factory(lambda m: None)({"llm": "auto"})
    if client is None:
        raise RuntimeError("the llm mode needs an LLM: TORCHPORT_LLM_BASE_URL or the local model")
    _copy(task, out)
    usage: dict[str, Any] = {}
    overlay: dict[str, str] = {}
    for path in sorted(out.rglob("*.py")):
        rel = str(path.relative_to(out))
        try:
            tree = astparse.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        spans = sorted(
            {
                (n.lineno, n.end_lineno or n.lineno)
                for n in ast.walk(tree)
                if isinstance(n, ast.stmt)
                and not hasattr(n, "body")
                and "cuda" in "\n".join(lines[n.lineno - 1 : n.end_lineno])
            },
            reverse=True,
        )
        for start, end in spans:
            request: RepairRequestRecord = {
                "kind": "construct",
                "target": target,
                "path": rel,
                "start_line": start,
                "end_line": end,
                "problem": f"this code uses CUDA; port it to {target}",
                "context": "",
            }
            overlay, record = rewriter.llm_repair(
                client,
                task.repo,
                overlay,
                out.parent / f"{out.name}-llm",
                request,
                max_turns=3,
                max_tokens=None,
            )
            for key, value in (record.get("usage") or {}).items():
                if isinstance(value, int | float):
                    usage[key] = usage.get(key, 0) + value
    for rel, text in overlay.items():
        (out / rel).write_text(text, encoding="utf-8")
    return Migration(out, verify_tree(task, out, target, limits, cache), llm=usage)


# The keys are cli.evaluate.MODES (kept there so the command line starts fast).
RUNNERS: dict[str, Callable[..., Migration]] = {
    "rules": agent_graph("none"),
    "rules+llm": agent_graph("auto"),
    "llm": llm_only,
    "naive": naive,
    "shim": shim,
}


def run_mode(
    mode: str, task: Task, target: str, out: Path, limits: RunLimits, cache: Path
) -> tuple[Migration, float]:
    started = time.perf_counter()
    migration = RUNNERS[mode](task, target, out, limits, cache)
    return migration, time.perf_counter() - started
