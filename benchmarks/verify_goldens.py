"""Verify the builtin suite's hand-written golden ports the way a mode's port is verified.

A task's ``expected`` verdicts say what a correct port reaches; the goldens are the correct
ports, so each golden must reach its task's expected verdict, or the expectation (or the
golden) is wrong. Not part of ``make test`` (each verification runs two sandboxed programs):
run it after adding or changing a task.

    python benchmarks/verify_goldens.py --tasks apex-imagenet-amp --targets tpu,neuron
    python benchmarks/verify_goldens.py --difficulty hard --json rows.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from torchport.agents.verifier import RunLimits
from torchport.evals.modes import verify_tree
from torchport.evals.tasks import DIFFICULTIES, Task, load_suite

_IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".keep")


def golden_tree(task: Task, target: str, into: Path) -> Path:
    """The task's repository with its golden files for ``target`` laid over it."""
    tree = into / f"{task.name}-{target}"
    shutil.copytree(task.repo, tree, ignore=_IGNORE)
    shutil.copytree(task.golden(target), tree, ignore=_IGNORE, dirs_exist_ok=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="builtin")
    parser.add_argument("--tasks", default="", help="comma list (default: all)")
    parser.add_argument("--difficulty", choices=DIFFICULTIES)
    parser.add_argument("--targets", default="tpu,neuron,accelerator")
    parser.add_argument("--steps", type=int, default=RunLimits.steps)
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)

    tasks = load_suite(args.suite, [t for t in args.tasks.split(",") if t] or None)
    if args.difficulty:
        tasks = [t for t in tasks if t.difficulty == args.difficulty]
    budget = RunLimits(steps=args.steps, forwards=args.steps)
    rows, wrong = [], 0
    with tempfile.TemporaryDirectory(prefix="torchport-goldens-") as scratch:
        for task in tasks:
            for target in args.targets.split(","):
                started = time.perf_counter()
                tree = golden_tree(task, target, Path(scratch))
                verdict = verify_tree(task, tree, target, budget, Path(scratch) / "cache")
                expected = task.expected.get(target)
                ok = verdict.get("verdict") == expected
                wrong += not ok
                row = {
                    "task": task.name,
                    "target": target,
                    "expected": expected,
                    "verdict": verdict.get("verdict"),
                    "reason": verdict.get("reason", ""),
                    "seconds": round(time.perf_counter() - started, 1),
                }
                rows.append(row)
                mark = "ok " if ok else "NO "
                print(
                    f"{mark} {task.name:28} {target:12} {row['verdict']:13} "
                    f"(expected {expected}) {row['seconds']:6.1f}s  {row['reason'][:100]}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"{len(rows) - wrong}/{len(rows)} goldens reach their expected verdict")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
