"""Where one verification of the bundled example spends its wall time, phase by phase.

examples/cuda_mnist is migrated to tpu (rules only), then verified three ways in one
run: the original not yet cached with the two runs one after the other (as before
issue 16), the same with the two runs together, and the original cached (the
migration's run alone, as in a second round or a second target). Each prints the
phases ``verification.json`` records (``timings``). The baseline, measured in the
same run: ``python -c "import torch"`` (what any sandboxed run must pay), so the
sandbox's start-up (everything before the program: the copy, the isolation
backend, Python, torch, the emulated device) reads as a ratio against it. ``default``:
the port's second run, at the TPU's default matmul precision (agents/precision_check.py),
which a tpu port that does matmuls pays on top (in ``total``).

Not a test: prints figures. Usage: `make bench`, or
`python benchmarks/verify_phases.py [--repeats 1] [--steps 5] [--isolation auto]`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchport.agents.verifier import RunLimits, verify_tree
from torchport.agents.verify_pair import cores, memory_available_mb
from torchport.sandbox.harness import PHASES
from torchport.tools.migrate import MigrateOptions, migrate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cuda_mnist"
ENTRY = ["python", "train.py"]
TARGET = "tpu"


def seconds_of(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def baseline(repeats: int) -> dict[str, float]:
    """Python's start alone, and with torch imported (the median of ``repeats``)."""
    python = [sys.executable, "-c"]
    return {
        "python": statistics.median(seconds_of([*python, "pass"]) for _ in range(repeats)),
        "import torch": statistics.median(
            seconds_of([*python, "import torch"]) for _ in range(repeats)
        ),
    }


def migrated_tree(scratch: Path) -> Path:
    out = scratch / "migrated"
    migrate(EXAMPLE, MigrateOptions(target=TARGET, out=out))
    return out


def verification(
    tree: Path, budget: RunLimits, cache: Path, together: bool
) -> tuple[str, dict[str, Any]]:
    verdict, _ = verify_tree(EXAMPLE, tree, ENTRY, TARGET, budget, cache, together=together)
    return verdict.verdict, verdict.timings


def row(label: str, verdict: str, t: dict[str, Any]) -> str:
    ref, mig = t["reference"], t["migrated"]
    phases = mig.get("phases") or {}
    cells = " ".join(f"{phases.get(name, float('nan')):>11.2f}" for name, _, _ in PHASES)
    return (
        f"{label:<26} {t['total_s']:>7.2f} {ref['source']:>6} {ref['seconds']:>7.2f} "
        f"{cells} {mig.get('start_up_s', float('nan')):>9.2f} {t['compare_s']:>7.3f} "
        f"{(t.get('default_precision') or {}).get('seconds', float('nan')):>7.2f}  {verdict}"
    )


def header() -> str:
    names = " ".join(f"{name:>11}" for name, _, _ in PHASES)
    return (
        f"{'':<26} {'total':>7} {'ref':>6} {'ref s':>7} {names} {'start-up':>9} {'compare':>7} "
        f"{'default':>7}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="each way, alternating")
    parser.add_argument("--steps", type=int, default=RunLimits.steps)
    parser.add_argument("--isolation", default=RunLimits.isolation)
    args = parser.parse_args()
    budget = RunLimits(steps=args.steps, forwards=args.steps, isolation=args.isolation)
    print(
        f"verification of examples/cuda_mnist -> {TARGET}, {args.steps} steps, isolation "
        f"{args.isolation}; {cores()} cores, {memory_available_mb()} MB available"
    )
    with tempfile.TemporaryDirectory(prefix="verify-phases-") as tmp:
        tree = migrated_tree(Path(tmp))
        ways: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
            "cold, one after the other": lambda i: verification(
                tree, budget, Path(tmp) / f"sequential{i}", together=False
            ),
            "cold, together": lambda i: verification(
                tree, budget, Path(tmp) / f"together{i}", together=True
            ),
            "original cached": lambda i: verification(
                tree, budget, Path(tmp) / f"together{i}", together=True
            ),
        }
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in ways}
        base = baseline(3)
        print(
            f"baseline: python -c pass {base['python']:.2f} s, import torch "
            f"{base['import torch']:.2f} s\n{header()}"
        )
        for i in range(args.repeats):
            for name, way in ways.items():
                verdict, timings = way(i)
                results[name].append(timings)
                print(row(name, verdict, timings), flush=True)
    summary(results, base)


def summary(results: dict[str, list[dict[str, Any]]], base: dict[str, float]) -> None:
    def median(name: str, pick: Callable[[dict[str, Any]], float]) -> float:
        return statistics.median(pick(t) for t in results[name])

    sequential = median("cold, one after the other", lambda t: t["total_s"])
    together = median("cold, together", lambda t: t["total_s"])
    start_up = median("original cached", lambda t: t["migrated"]["start_up_s"])
    cached = median("original cached", lambda t: t["total_s"])
    torch_s = base["import torch"]
    print(
        f"\nthe two runs together / one after the other: {together / sequential:.2f}x "
        f"({together:.1f} s / {sequential:.1f} s)\n"
        f"sandbox start-up / python -c 'import torch': {start_up / torch_s:.2f}x "
        f"({start_up:.2f} s / {torch_s:.2f} s)\n"
        f"verification with the original cached / import torch: {cached / torch_s:.2f}x "
        f"({cached:.1f} s)"
    )


if __name__ == "__main__":
    main()
