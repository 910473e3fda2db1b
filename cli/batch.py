"""``torchport batch``: many repositories, in parallel, resumable, with one summary.

Parsing and printing only; the work is in ``driver`` (what to run, bookkeeping),
``executors`` (where it runs) and ``job`` (one repository). Every input problem
is found before the first job starts, and exits 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
from pathlib import Path
from typing import Any

from torchport.agents.verdicts import Verdict
from torchport.tools.catalogue import TARGETS

from .options import (
    add_agent_limits,
    add_exclude,
    add_llm,
    add_run_budget,
    add_tolerance,
    apply_project_config,
    budget_settings,
    fail,
    positive_int,
    project_overrides,
)

EXIT_VERIFIED, EXIT_NOT_ALL, EXIT_ERROR = 0, 1, 2

EPILOG = f"""\
SOURCES:
  a folder       each subfolder is one repository (hidden folders are skipped)
  a text file    one `PATH_OR_GIT_URL [REF [NAME]] [-- ENTRY]` per line ('-' for
                 no REF); '#' starts a comment (quote one in ENTRY); blank lines
                 are ignored
  a .csv file    a header row with a `source` column and optional `ref`, `name`,
                 `entry`
  Relative paths are read from the list file's folder. Local folders are read in
  place and never written. Git sources (a URL, file://, a path ending .git or a
  bare repository, or any entry with a REF) are cloned into DIR/sources/NAME and
  REF (tag, branch or commit) is checked out there. NAME defaults to the folder or
  repository name; names must be unique. ENTRY (everything after `--`, or the
  `entry` cell) is how that repository's program is run, as migrate's --entry:
    ../models/bert  v2.1  bert  -- python run.py --epochs 1
  Without it the planner picks the entry point, as migrate does.

DIR afterwards:
  summary.md, .csv, .json   one row per repository (verdict, constructs, converted
                            share, manual items, LLM tokens, time) and the totals
  summary.png               verdict counts and time per repository (summary.md shows it)
  results/NAME.json         each finished repository's record
  repos/NAME/migrated/      the migrated copy, with torchport-report/ inside
  logs/NAME.log             what the repository's migration printed
  journal.jsonl             one line each time a repository is started or finished

resuming: run the same command again. Finished repositories are read back, not
redone; one that was running when the batch was killed is redone from scratch.
Delete results/NAME.json to redo one repository. One repository's failure (even a
crash of its process) is recorded as its verdict `error`; the batch carries on.

configuration: each repository's own [tool.torchport] (pyproject.toml) or
torchport.toml applies to its job (entry, steps, exclude, skip, tolerance, deps), under
TORCHPORT_* variables and the flags given here; --target is the batch's, for all.
A repository whose configuration is bad is recorded as `error`, saying why.

memory: at most --jobs repositories are migrated at once, each in a fresh process
(or Ray worker); each needs up to --memory MiB for its sandboxed runs and about
1 GiB for its agent process, so plan for about jobs x (memory + 1024) MiB.

exit status:
  {EXIT_VERIFIED}  every repository verified (with --no-verify: migrated without error)
  {EXIT_NOT_ALL}  all done, but some repository was not verified or hit an error
  {EXIT_ERROR}  nothing ran: bad SOURCES, bad option, DIR holds another batch, no Ray

examples:
  torchport batch repos/ --target tpu --out port-tpu --jobs 4
  torchport batch repos.txt -t neuron --out port-neuron --steps 3
  echo '../vit -- python train.py --lr 0.1' > repos.txt; torchport batch repos.txt -t tpu -o port
  torchport batch repos.csv -t tpu --out /shared/port --executor ray --ray-address HEAD:6379
"""


def add_parser(sub: Any) -> None:
    b = sub.add_parser(
        "batch",
        help="migrate many repositories in parallel, resumably, with a summary",
        description="Migrate every repository in SOURCES to TARGET, each in its own process "
        "(or Ray task), verify each on the emulated device, and write per-repository reports "
        "and a summary (Markdown, CSV, JSON) to DIR. A killed batch resumes where it stopped.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("sources", metavar="SOURCES", help="a folder of repositories or a list file")
    b.add_argument(
        "--target",
        "-t",
        choices=TARGETS,
        required=True,
        help="where the code goes, for every repository (required)",
    )
    b.add_argument("--out", "-o", metavar="DIR", required=True, help="the batch's folder")
    b.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
        default=1,
        help="repositories migrated at once (default: 1)",
    )
    b.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local: processes on this machine (default); ray: tasks on a Ray cluster "
        "(pip install 'torchport[cluster]')",
    )
    b.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="the Ray cluster to use (default: $RAY_ADDRESS, else a local Ray instance)",
    )
    add_exclude(b)
    verify = b.add_argument_group("verification (per repository)")
    verify.add_argument(
        "--no-verify", action="store_true", help="skip running the programs; codemods only"
    )
    add_run_budget(verify, deps=True)
    add_tolerance(verify)
    agent = b.add_argument_group("agents")
    add_llm(
        agent,
        "none",
        "; rules only, reproducible and cheap. local: one embedded model shared by the "
        "local jobs; each Ray job starts its own",
    )
    add_agent_limits(agent, "per repository")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")
    b.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """The batch's settings: what the summary shows, and what every job starts from; each
    job puts its repository's own file under ``overrides`` (``agents.batch.job``)."""
    overrides = project_overrides(args)
    apply_project_config(args, None)  # the batch's own: defaults, TORCHPORT_*, flags
    return {
        "target": args.target,
        "verify": not args.no_verify,
        **budget_settings(args),
        "max_iterations": args.max_iterations,
        "max_llm_tokens": args.max_llm_tokens,
        "llm": args.llm,
        "overrides": dataclasses.asdict(overrides),
    }


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    import os

    from torchport.agents.batch.driver import run_batch
    from torchport.agents.batch.executors import ExecutorError, make_executor
    from torchport.agents.batch.sources import SourcesError, read_sources
    from torchport.agents.batch.store import StoreError
    from torchport.agents.llm.config import LLMConfigError, resolve
    from torchport.agents.project_config import ConfigError

    try:
        resolve(args.llm, os.environ)  # a bad --llm fails here, not in every job
        settings = _settings(args)  # and a bad TORCHPORT_* variable
    except (LLMConfigError, ConfigError) as exc:
        return fail(str(exc))
    out = Path(args.out).expanduser().resolve()
    # `kill PID` (a scheduler's stop) unwinds like Ctrl-C: the running jobs are stopped
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        sources = read_sources(args.sources, exclude=out)
        executor = make_executor(args.executor, args.jobs, args.ray_address)
        summary = run_batch(sources, out, settings, executor, quiet=args.quiet)
    except (SourcesError, ExecutorError, StoreError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot use {out}: {exc}")
    finally:
        signal.signal(signal.SIGTERM, previous)
    good = "verified" if not args.no_verify else Verdict.NOT_VERIFIED
    if all(row["verdict"] == good for row in summary["repos"]):
        return EXIT_VERIFIED
    return EXIT_NOT_ALL
