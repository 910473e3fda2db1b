"""``torchport scan``: every CUDA-specific construct in a repository, as a report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from torchport.tools.atomicfile import atomic_write
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.filenames import PRINTABLE_ERRORS
from torchport.tools.report import FORMATS, render_text
from torchport.tools.scanner import ScanError, ScanOptions, scan
from torchport.tools.sourcefile import DEFAULT_MAX_BYTES

from .options import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, fail, non_negative_int, positive_int

SCAN_EPILOG = f"""\
exit status:
  {EXIT_CLEAN}  no findings (or --exit-zero)
  {EXIT_FINDINGS}  findings were reported
  {EXIT_ERROR}  the scan could not run (bad path, bad option, unreadable output file)

examples:
  torchport scan .                              findings for every target
  torchport scan repo/ --target tpu             only what matters for TorchTPU, its fixes
  torchport scan repo/ -t tpu --all-targets     the same findings, every target's fix
  torchport scan repo/ --format sarif -o torchport.sarif   for GitHub code scanning
  torchport scan repo/ --select TPD,TPA001      only device rules and TPA001
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
    p.add_argument("path", help="repository folder or single file to scan")
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
    p.add_argument(
        "--exit-zero",
        action="store_true",
        help=f"exit {EXIT_CLEAN} even when findings are reported",
    )
    _add_speed(p)
    p.set_defaults(func=run)


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


def run(args: argparse.Namespace) -> int:
    options = ScanOptions(
        target=args.target,
        select=tuple(c for c in (args.select or "").split(",") if c.strip()),
        max_bytes=args.max_file_size,
        jobs=args.jobs,
        prefilter=not args.no_prefilter,
        all_targets=args.all_targets,
    )
    if options.select and not load_catalogue().select(list(options.select)):
        return fail(f"--select {args.select!r} matches no rule (see `torchport rules`)")
    show_progress = not args.quiet and sys.stderr.isatty()
    try:
        result = scan(args.path, options, progress=_progress if show_progress else None)
    except ScanError as exc:
        return fail(str(exc))
    if args.format == "text":
        report = render_text(result, all_targets=args.all_targets)
    else:
        report = FORMATS[args.format](result)
    if args.output:
        try:
            atomic_write(Path(args.output), report, errors=PRINTABLE_ERRORS)
        except OSError as exc:
            return fail(f"cannot write {args.output}: {exc.strerror or exc}")
        if not args.quiet:
            print(f"{len(result.findings)} findings written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(report)
    return EXIT_FINDINGS if result.findings and not args.exit_zero else EXIT_CLEAN
