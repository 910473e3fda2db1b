"""``torchport scan``: every CUDA-specific construct in a repository, as a report; also
what a pre-commit hook or a CI job needs (files given by name, a baseline of accepted
findings, the severity that fails)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torchport.agents.project_config import SEVERITIES, ConfigError, project_root
from torchport.tools.atomicfile import atomic_write
from torchport.tools.baseline import BaselineError, new_findings, read_baseline, render_baseline
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.filenames import PRINTABLE_ERRORS
from torchport.tools.findings import Finding
from torchport.tools.report import FORMATS, render_text
from torchport.tools.scanner import ScanError, ScanOptions, scan, scan_files
from torchport.tools.sourcefile import DEFAULT_MAX_BYTES

from .options import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    BuiltIn,
    add_exclude,
    apply_project_config,
    fail,
    non_negative_int,
    positive_int,
)

SCAN_EPILOG = f"""\
exit status:
  {EXIT_CLEAN}  no findings (or none new with --baseline, none at --fail-on or above,
     --exit-zero, --write-baseline)
  {EXIT_FINDINGS}  findings were reported
  {EXIT_ERROR}  the scan could not run (bad path, bad option, bad config or baseline,
     unreadable output file)

PATH: one folder (the repository; default: the current folder), or files, named
relative to their repository's root: the nearest folder above them holding .git,
.hg, torchport.toml or a pyproject.toml with [tool.torchport] (a pre-commit hook's
files read as a scan of the whole repository names them). The repository's
[tool.torchport] or torchport.toml settings apply (`torchport config` shows them).

examples:
  torchport scan .                              findings for every target
  torchport scan repo/ --target tpu             only what matters for TorchTPU, its fixes
  torchport scan repo/ -t tpu --all-targets     the same findings, every target's fix
  torchport scan repo/ --format sarif -o torchport.sarif   for GitHub code scanning
  torchport scan repo/ --select TPD,TPA001      only device rules and TPA001
  torchport scan . -t tpu --exclude 'third_party/' --exclude '*_cuda.py'
  torchport scan . -t tpu --write-baseline .torchport-baseline.json   accept today's
  torchport scan . -t tpu --baseline .torchport-baseline.json --fail-on warning
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "scan",
        help="find every CUDA-specific construct in a repository",
        description="Scan a repository (or one file) for CUDA-specific constructs: where they "
        "are, which rule, and how each target fixes them. Honours .gitignore; never follows "
        "symlinks out of the repository; files it cannot read are listed as skipped.",
        epilog=SCAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths",
        nargs="*",
        default=["."],
        metavar="PATH",
        help="the repository's folder, or files in it (default: the current folder)",
    )
    p.add_argument(
        "--target",
        "-t",
        choices=TARGETS,
        help="report only what this target needs fixed (default: all targets)",
    )
    p.add_argument(
        "--all-targets",
        action="store_true",
        help="with --target, show every target's fix beside each finding, not only the "
        "target's (text; JSON, SARIF and Markdown list them all then too)",
    )
    p.add_argument(
        "--format",
        "-f",
        choices=sorted(FORMATS),
        default="text",
        help="output format (default: text)",
    )
    p.add_argument(
        "--output", "-o", metavar="FILE", help="write the report to FILE instead of standard output"
    )
    p.add_argument(
        "--select",
        metavar="CODES",
        help="comma-separated rule codes or prefixes to check (e.g. TPD,TPA001)",
    )
    add_exclude(p)
    _add_gate(p)
    _add_speed(p)
    p.set_defaults(func=run)


def _add_gate(p: argparse.ArgumentParser) -> None:
    """When findings fail the scan: what a pre-commit hook or a CI job decides by."""
    p.add_argument(
        "--fail-on",
        choices=SEVERITIES,
        default=BuiltIn("info"),
        help=f"exit {EXIT_FINDINGS} only for findings of this severity or above (info: any)",
    )
    p.add_argument(
        "--baseline",
        metavar="FILE",
        help="accept the findings FILE lists (written by --write-baseline, or a JSON "
        "report); report and fail on new ones only. Matched by rule, file and the line's "
        "text, so edits that move lines keep old findings old",
    )
    p.add_argument(
        "--write-baseline",
        metavar="FILE",
        help=f"write today's findings to FILE as the baseline, print no report, exit {EXIT_CLEAN}",
    )
    p.add_argument(
        "--exit-zero",
        action="store_true",
        help=f"exit {EXIT_CLEAN} even when findings are reported",
    )


def _add_speed(p: argparse.ArgumentParser) -> None:
    """How the scan runs: workers, the largest file read, the trigger-word prefilter."""
    p.add_argument(
        "--jobs",
        "-j",
        type=non_negative_int,
        default=0,
        help="worker processes (default 0: one per CPU; 1 disables parallelism)",
    )
    p.add_argument(
        "--max-file-size",
        type=positive_int,
        default=DEFAULT_MAX_BYTES,
        metavar="BYTES",
        help=f"skip files larger than this (default: {DEFAULT_MAX_BYTES})",
    )
    p.add_argument(
        "--no-prefilter",
        action="store_true",
        help="parse every file, even those with none of the rules' trigger words "
        "(slower; also reports syntax errors in files that could hold no findings)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on standard error")


def _progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rscanning: {done}/{total} files")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _where(paths: list[str]) -> tuple[Path, list[Path] | None]:
    """The repository's root, and the files to scan (None: all of the root's)."""
    given = [Path(p) for p in paths]
    missing = [p for p in given if not p.exists()]
    if missing:
        raise ScanError(f"no such file or directory: {missing[0]}")
    if len(given) == 1 and given[0].is_dir():
        return given[0], None
    if any(p.is_dir() for p in given):
        raise ScanError("give one folder, or files (not folders and files together)")
    return project_root(given), given


def _write(path: str, text: str, what: str, quiet: bool) -> str | None:
    """Write a report or a baseline; the error to print when it cannot be written."""
    try:
        atomic_write(Path(path), text, errors=PRINTABLE_ERRORS)
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    if not quiet:
        print(f"{what} written to {path}", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    try:
        root, files = _where(args.paths)
        apply_project_config(args, root)
        wanted = args.baseline and not args.write_baseline
        accepted = read_baseline(Path(args.baseline)) if wanted else None
    except (ScanError, ConfigError, BaselineError) as exc:
        return fail(str(exc))
    options = ScanOptions(
        target=args.target,
        select=tuple(c for c in (args.select or "").split(",") if c.strip()),
        skip=tuple(args.skip),
        exclude=tuple(args.exclude),
        max_bytes=args.max_file_size,
        jobs=args.jobs,
        prefilter=not args.no_prefilter,
        all_targets=args.all_targets,
    )
    if options.select and not load_catalogue().select(list(options.select)):
        return fail(f"--select {args.select!r} matches no rule (see `torchport rules`)")
    show_progress = not args.quiet and sys.stderr.isatty()
    try:
        progress = _progress if show_progress else None
        result = (
            scan(root, options, progress)
            if files is None
            else scan_files(root, files, options, progress)
        )
    except ScanError as exc:
        return fail(str(exc))
    if args.write_baseline:
        what = f"baseline of {len(result.findings)} findings"
        error = _write(args.write_baseline, render_baseline(result), what, args.quiet)
        return fail(error) if error else EXIT_CLEAN
    if accepted is not None:
        found = len(result.findings)
        result.findings = new_findings(result.findings, accepted)
        if not args.quiet:
            old = found - len(result.findings)
            print(f"{old} findings accepted by the baseline {args.baseline}", file=sys.stderr)
    if args.format == "text":
        report = render_text(result, all_targets=args.all_targets)
    else:
        report = FORMATS[args.format](result)
    if args.output:
        error = _write(args.output, report, f"{len(result.findings)} findings", args.quiet)
        if error:
            return fail(error)
    else:
        sys.stdout.write(report)
    return _status(result.findings, args)


def _status(findings: list[Finding], args: argparse.Namespace) -> int:
    """Findings at --fail-on or above fail the scan, unless --exit-zero."""
    least = SEVERITIES.index(args.fail_on)
    failing = [f for f in findings if SEVERITIES.index(f.severity) >= least]
    return EXIT_FINDINGS if failing and not args.exit_zero else EXIT_CLEAN
