"""``torchport migrate``: the agent graph from the command line.

Parsing and printing only; the work is in ``agents.graph``. Verification is on
by default, so a migration that says ``verified`` ran on the emulated device
and matched the original; ``--no-verify`` gives the codemods alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchport.agents.data_notes import data_notes
from torchport.agents.verdicts import Verdict
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.safetext import terminal_line, terminal_text

if TYPE_CHECKING:
    from torchport.agents.report_record import ReportRecord
    from torchport.agents.state import State
    from torchport.agents.verification_records import VerificationRecord
    from torchport.tools.migration_result import MigrationResult

from .options import (
    add_agent_limits,
    add_exclude,
    add_llm,
    add_run_budget,
    add_tolerance,
    apply_project_config,
    budget_settings,
    fail,
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

EPILOG = f"""\
verdicts (with verification, the default):
  verified      the migration ran on the emulated device and its losses (or outputs)
                match the original's, run on the CUDA reference shim, within the
                tolerance policy (tight for fp32, looser where the target runs bf16)
  ran           it ran on the emulated device; parity was not established (why is said)
  failed        it did not run, or its numbers differ; the error is classified
  not-runnable  no entry point, missing data or packages, or a target with no emulator

exit status:
  {EXIT_CLEAN}  migrated, verified (or --no-verify), nothing left for a human
  {EXIT_FINDINGS}  migrated, but not verified or some constructs are left for a human
  {EXIT_ERROR}  nothing was migrated (bad path, dirty tree, existing output, bad option)

examples:
  torchport migrate repo/ --target tpu              writes repo-tpu/ after verifying it
  torchport migrate repo/ -t neuron --dry-run       shows the diff, writes nothing
  torchport migrate repo/ -t accelerator --in-place rewrites a clean git checkout
  torchport migrate repo/ -t xla --branch port-xla  commits on a new branch
  torchport migrate repo/ -t tpu --entry "python train.py --epochs 1"
  torchport migrate repo/ -t tpu --llm local        lets the embedded model fix the long tail
  torchport migrate --resume 20261130-101500-ab12cd continues a killed run
  torchport migrate repo/ -t tpu --exclude 'third_party/' --skip TPP   leaves them alone

The repository's [tool.torchport] (pyproject.toml) or torchport.toml sets target, entry,
steps, exclude, skip, tolerance and deps; TORCHPORT_TARGET, TORCHPORT_ENTRY, ... override
it, and flags override both (`torchport config PATH` shows what applies, and why).

Runs are checkpointed in $TORCHPORT_HOME/checkpoints.sqlite (default ~/.cache/torchport).
LLM endpoints: --llm URL, or TORCHPORT_LLM_BASE_URL / TORCHPORT_LLM_MODEL, with the key
in TORCHPORT_LLM_API_KEY or OPENAI_API_KEY (never passed to the sandbox).
"""


def add_parser(sub: Any) -> None:
    m = sub.add_parser(
        "migrate",
        help="rewrite a repository for a target and verify it on the emulated device",
        description="Apply every automatic fix for TARGET, let the LLM (if any) handle the "
        "long tail, then run the original on the CUDA reference shim and the migration on the "
        "emulated device and compare. A migrated copy is written to PATH-<target> (PATH is "
        "untouched) with torchport-report/ (changes.patch, changes.json, changes.csv, "
        "manual.md, summary.md, verification.json, verification.md, and index.html: all of it "
        "on one page, for a browser).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    m.add_argument("path", nargs="?", help="repository folder to migrate")
    m.add_argument(
        "--target",
        "-t",
        choices=TARGETS,
        help="where the code goes (required unless --resume: this flag, TORCHPORT_TARGET or "
        "the repository's `target` setting)",
    )
    _add_output(m)
    _add_verification(m)
    m.add_argument("--format", "-f", choices=["text", "json"], default="text")
    m.add_argument(
        "--exit-zero",
        action="store_true",
        help=f"exit {EXIT_CLEAN} when migrated, even if not verified or items are left",
    )
    m.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")
    m.set_defaults(func=run)


def _add_output(m: argparse.ArgumentParser) -> None:
    """Where the result goes and which rules make it."""
    where = m.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        metavar="DIR",
        help="write the migrated copy here: a new or empty folder, or torchport's earlier "
        "output of the same PATH (replaced whole)",
    )
    where.add_argument(
        "--in-place",
        action="store_true",
        help="rewrite PATH itself (a git repo with a clean tree, or --force)",
    )
    where.add_argument(
        "--branch",
        metavar="NAME",
        help="commit the result on a new branch NAME (no checkout; the report goes beside PATH)",
    )
    m.add_argument(
        "--rules", metavar="CODES", help="only these rule codes or prefixes (e.g. TPD,TPA001)"
    )
    add_exclude(m)
    m.add_argument(
        "--dry-run", action="store_true", help="write nothing; print the diff and the summary"
    )
    m.add_argument(
        "--safe-only",
        action="store_true",
        help="apply only the fixes that cannot change what the program computes (renames, "
        "device strings); leave those that change numerics (fp16 -> bf16, dropped loss "
        "scaling) or behaviour (removed calls, rewritten timers) for a human, listed in "
        "manual.md",
    )
    m.add_argument(
        "--annotate",
        action="store_true",
        help="add a '# torchport: CODE ...' comment at each construct left for a human",
    )
    m.add_argument(
        "--force",
        action="store_true",
        help="allow a dirty or non-git tree with --in-place (every file it rewrites is "
        "backed up in torchport-report/backup/ either way), and replace an earlier torchport "
        "output whose files were edited since; never a folder holding files torchport did not "
        "write, never the source or a folder containing it",
    )


def _add_verification(m: argparse.ArgumentParser) -> None:
    """How the migration is proven, and how far the agents may go to make it so."""
    verify = m.add_argument_group("verification")
    verify.add_argument(
        "--no-verify", action="store_true", help="skip running the programs; codemods only"
    )
    verify.add_argument(
        "--entry", metavar="CMD", help='how to run the program, e.g. "python train.py --lr 0.1"'
    )
    add_run_budget(verify, deps=True)
    add_tolerance(verify)
    agent = m.add_argument_group("agents")
    add_llm(agent, "auto")
    add_agent_limits(agent, "for the run")
    agent.add_argument("--resume", metavar="RUN_ID", help="continue a killed run")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "source": str(Path(args.path).resolve()),
        "target": args.target,
        "select": [c.strip() for c in (args.rules or "").split(",") if c.strip()],
        "skip": list(args.skip),
        "exclude": list(args.exclude),
        "entry": args.entry,
        "verify": not args.no_verify,
        **budget_settings(args),
        "max_iterations": args.max_iterations,
        "max_llm_tokens": args.max_llm_tokens,
        "llm": args.llm,
        "out": str(Path(args.out).resolve()) if args.out else None,
        "in_place": args.in_place,
        "branch": args.branch,
        "force": args.force,
        "annotate": args.annotate,
        "dry_run": args.dry_run,
        "safe_only": args.safe_only,
    }


def run(args: argparse.Namespace) -> int:
    from torchport.agents import config_record, graph, runs
    from torchport.agents.deliver import migration_result, options_of, verification_record
    from torchport.agents.llm.factory import LLMSetupError, llm_factory
    from torchport.agents.project_config import ConfigError
    from torchport.tools.migrate import MigrateError, check_options  # codemods: ~0.3 s

    def say(message: str) -> None:
        if not args.quiet:  # progress quotes file names and the program's errors
            print(f"torchport: {terminal_line(message)}", file=sys.stderr, flush=True)

    try:
        if args.resume:
            graph.saved_state(args.resume)  # an unknown run id fails here, before any LLM starts
            runtime = graph.Runtime(args.resume, say, llm_factory(say))
            final = graph.resume(runtime)
        else:
            if not args.path:
                return fail("migrate needs PATH and --target (or --resume RUN_ID)")
            apply_project_config(args, Path(args.path))
            if not args.target:
                return fail(
                    "migrate needs --target (or TORCHPORT_TARGET, or `target` in the "
                    "repository's [tool.torchport] or torchport.toml)"
                )
            if args.rules and not load_catalogue().select(args.rules.split(",")):
                return fail(f"--rules {args.rules!r} matches no rule (see `torchport rules`)")
            settings = _settings(args)
            check_options(Path(settings["source"]), options_of(settings))
            run_id = runs.new_run_id()
            settings["run_id"] = run_id
            say(f"run {run_id} (resume with: torchport migrate --resume {run_id})")
            say(config_record.summary(settings.get(config_record.KEY)))
            final = graph.start(settings, graph.Runtime(run_id, say, llm_factory(say)))
    except (MigrateError, graph.GraphError, LLMSetupError, ConfigError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write the migration: {exc}")
    return _print(args, final, migration_result, verification_record)


def _print(
    args: argparse.Namespace,
    final: State,
    migration_result: Callable[[State], MigrationResult],
    record: Callable[[State, str], ReportRecord],
) -> int:
    from torchport.agents import config_record
    from torchport.agents.deliver import sandbox_used
    from torchport.agents.environment import summary_line
    from torchport.tools.filenames import printable_data
    from torchport.tools.report.counts import count_constructs
    from torchport.tools.report.migration import (
        migration_to_dict,
        one_line_summary,
        unified_diff,
    )

    # read as plain mappings: the run's settings and verification hold keys their TypedDicts
    # do not list yet (the configuration, next_step)
    settings: Mapping[str, Any] = final["settings"]
    result = migration_result(final)
    written: Mapping[str, Any] = next(
        (d for d in reversed(final.get("decisions", [])) if d.get("node") == "deliver"), {}
    )
    verdict = final.get("outcome", Verdict.NOT_VERIFIED)
    if args.format == "json":
        data = migration_to_dict(result)
        data.update(output=written.get("output"), branch=written.get("branch"))
        data["verification"] = record(final, verdict)
        data["configuration"] = settings.get(config_record.KEY)
        if settings.get("dry_run"):
            data["diff"] = unified_diff(result)
        print(json.dumps(printable_data(data), indent=2, default=str))
    else:
        if settings.get("dry_run"):
            diff = unified_diff(result)  # exact through a pipe (a patch to apply), safe to view
            sys.stdout.write(terminal_text(diff) if sys.stdout.isatty() else diff)
        edits = len(final.get("agent_edits", []))
        llm = f"; {edits} LLM edits" if edits else ""
        print(f"{result.target}: {one_line_summary(result)}{llm}")
        if settings.get(config_record.KEY):  # a run resumed from before it was kept: none
            print(terminal_line(config_record.summary(settings[config_record.KEY])))
        v: VerificationRecord = final.get("verification") or {}
        reason = f" — {terminal_line(v['reason'])}" if v.get("reason") else ""
        print(f"verdict: {terminal_line(verdict)}{reason}")
        if v.get("next_step"):
            print(f"next step: {terminal_line(v['next_step'])}")
        for note in data_notes(v.get("target")):
            print(terminal_line(note))
        if environment := final.get("environment"):
            print(terminal_line(summary_line(environment)))
        for used in sandbox_used(v):
            runs = " and ".join(used["runs"])
            print(f"sandbox ({runs}): {used['backend']} — {used['isolates']}")
        if written.get("output"):
            branch = (
                f" (branch {terminal_line(written['branch'])})" if written.get("branch") else ""
            )
            print(f"output: {terminal_line(written['output'])}{branch}")
        for key in ("backup", "report"):
            if written.get(key):
                print(f"{key}: {terminal_line(written[key])}")
        print(f"run: {settings.get('run_id')}")
    ok = verdict == Verdict.VERIFIED or not settings.get("verify", True)
    left = count_constructs(result).left  # advisories do not fail a run
    return EXIT_CLEAN if (ok and not left) or args.exit_zero else EXIT_FINDINGS
