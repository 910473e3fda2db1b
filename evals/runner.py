"""Run (task x mode x target) jobs in parallel, score each, and keep every result on disk.

Each finished job writes ``results/<task>__<mode>__<target>.json`` atomically, so a
killed evaluation resumes where it stopped (finished jobs are not redone) and one
job's failure is recorded as that job's result, never the end of the run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torchport.agents.reference_runs import RunLimits
from torchport.agents.verdicts import Verdict
from torchport.sandbox.isolation import hide_own_secrets
from torchport.tools.atomicfile import atomic_write
from torchport.tools.safetext import terminal_line
from torchport.tools.scanner import ScanOptions, scan

from .edit_scores import golden_tree_edits, score, tree_edits
from .modes import run_mode
from .tasks import Task


@dataclass
class Result:
    task: str
    mode: str
    target: str
    difficulty: str
    family: str
    expected: str
    verdict: str
    success: bool
    reason: str
    parity_max_rel: float | None
    residual_constructs: int
    precision: float
    recall: float
    files_touched: int
    outside_golden: list[str]
    llm_calls: int
    llm_tokens: int
    iterations: int
    wall_s: float
    report: str | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_key(task: str, mode: str, target: str) -> str:
    return f"{task}__{mode.replace('+', '-')}__{target}"


def residual(tree: Path, target: str) -> int:
    """CUDA constructs the target still has to deal with, in the migrated tree."""
    found = scan(tree, ScanOptions(target=target))
    return sum(1 for f in found.findings if f.fix[target]["kind"] != "none")


def evaluate(task: Task, mode: str, target: str, work: Path, budget: RunLimits) -> Result:
    """Migrate one task with one mode for one target, verify it and score its edits."""
    out = work / "migrations" / job_key(task.name, mode, target)
    migration, wall = run_mode(mode, task, target, out, budget, work / "home" / "references")
    v = migration.verification
    parity = v.get("parity") or {}
    candidate = tree_edits(task.repo, out)
    golden = task.golden(target)
    # no golden for this target: nothing to match (an empty Counter; `&` refuses a dict)
    golden_edits = golden_tree_edits(task.repo, golden) if golden.is_dir() else Counter()
    edit_score = score(candidate, golden_edits)
    expected = task.expected.get(target, Verdict.VERIFIED)
    verdict = str(v.get("verdict"))
    usage = migration.llm
    return Result(
        task=task.name,
        mode=mode,
        target=target,
        difficulty=task.difficulty,
        family=task.family,
        expected=expected,
        verdict=verdict,
        success=verdict == expected,
        reason=str(v.get("reason", "")),
        parity_max_rel=parity.get("max_rel"),
        residual_constructs=residual(out, target),
        precision=round(edit_score.precision, 4),
        recall=round(edit_score.recall, 4),
        files_touched=edit_score.files_touched,
        outside_golden=list(edit_score.outside_golden),
        llm_calls=int(usage.get("calls", 0)),
        llm_tokens=int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0)),
        iterations=migration.iterations,
        wall_s=round(wall, 2),
        report=migration.report,
    )


def _job(task: Task, mode: str, target: str, work: Path, budget: RunLimits) -> dict[str, Any]:
    hide_own_secrets()  # a spawned worker: its environ holds the keys again
    # Shared: the original's cached reference runs; per job: the graph's checkpoints.
    os.environ["TORCHPORT_HOME"] = str(work / "home")
    checkpoints = work / "home" / "checkpoints" / f"{job_key(task.name, mode, target)}.sqlite"
    checkpoints.parent.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHPORT_CHECKPOINTS"] = str(checkpoints)
    try:
        return evaluate(task, mode, target, work, budget).to_json()
    except Exception as exc:  # one job's crash is its result, not the run's end
        return Result(
            task.name,
            mode,
            target,
            task.difficulty,
            task.family,
            task.expected.get(target, Verdict.VERIFIED),
            "error",
            False,
            f"{type(exc).__name__}: {exc}",
            None,
            -1,
            0.0,
            0.0,
            0,
            [],
            0,
            0,
            0,
            0.0,
            None,
            traceback.format_exc(limit=5),
        ).to_json()


def _write(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data, indent=2))


def run_all(
    tasks: list[Task],
    modes: list[str],
    targets: list[str],
    work: Path,
    budget: RunLimits,
    jobs: int = 1,
    progress: Callable[[int, int, dict[str, Any] | None], None] | None = None,
) -> list[dict[str, Any]]:
    """Every job's result (finished ones read back from ``work/results``)."""
    results_dir = work / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    wanted = [(t, m, g) for t in tasks for m in modes for g in targets]
    done: dict[str, dict[str, Any]] = {}
    todo = []
    for task, mode, target in wanted:
        path = results_dir / f"{job_key(task.name, mode, target)}.json"
        if path.is_file():
            done[path.stem] = json.loads(path.read_text())
        else:
            todo.append((task, mode, target))
    total = len(wanted)
    if progress:
        progress(len(done), total, None)
    if todo:
        # spawn, not fork: torch's thread pools do not survive a fork
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
            futures = {pool.submit(_job, t, m, g, work, budget): (t, m, g) for t, m, g in todo}
            for future in as_completed(futures):
                task, mode, target = futures[future]
                key = job_key(task.name, mode, target)
                data = future.result()
                _write(results_dir / f"{key}.json", data)
                done[key] = data
                if progress:
                    progress(len(done), total, data)
    return [done[job_key(t.name, m, g)] for t, m, g in wanted]


def print_progress(done: int, total: int, last: dict[str, Any] | None) -> None:
    """One line per finished job on standard error (a live bar on a terminal)."""
    width = 30
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "-" * (width - filled)
    what = f" {last['task']} [{last['mode']}, {last['target']}]: {last['verdict']}" if last else ""
    what = terminal_line(what)
    end = "\r" if sys.stderr.isatty() and done < total else "\n"
    print(f"[{bar}] {done}/{total}{what}".ljust(100), end=end, file=sys.stderr, flush=True)
