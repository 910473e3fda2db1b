"""The ``torchport`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import textwrap
from pathlib import Path

from torchport.sandbox.isolation import hide_own_secrets
from torchport.sandbox.limits import MAX_SEED, RUN_STEPS
from torchport.sandbox.modes import EMULATED
from torchport.tools import __version__
from torchport.tools.atomicfile import atomic_write
from torchport.tools.catalogue import TARGETS, CatalogueError, load_catalogue
from torchport.tools.filenames import PRINTABLE_ERRORS
from torchport.tools.report import FORMATS
from torchport.tools.safetext import terminal_line
from torchport.tools.scanner import ScanError, ScanOptions, scan
from torchport.tools.sourcefile import DEFAULT_MAX_BYTES

from . import migrate_command
from .cli_options import (
    OneLineParser,
    add_run_budget,
    fail,
    non_negative_int,
    positive_int,
    seed,
)

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

SCAN_EPILOG = f"""\
exit status:
  {EXIT_CLEAN}  no findings (or --exit-zero)
  {EXIT_FINDINGS}  findings were reported
  {EXIT_ERROR}  the scan could not run (bad path, bad option, unreadable output file)

examples:
  torchport scan .                              findings for every target
  torchport scan repo/ --target tpu             only what matters for TorchTPU
  torchport scan repo/ --format sarif -o torchport.sarif   for GitHub code scanning
  torchport scan repo/ --select TPD,TPA001      only device rules and TPA001
"""


def _build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="torchport",
        description="Port PyTorch programs off CUDA (to tpu, neuron, xla or device-agnostic "
        "torch.accelerator code) and prove the port on an emulated device.",
    )
    parser.add_argument("--version", action="version", version=f"torchport {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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
    p.set_defaults(func=_cmd_scan)

    migrate_command.add_parser(sub)
    importlib.import_module("torchport.agents.batch.command").add_parser(sub)  # many repos
    importlib.import_module("torchport.evals.cli").add_parser(sub)  # the eval front door
    importlib.import_module("torchport.agents.chat.command").add_parser(sub)
    importlib.import_module("torchport.agents.doctor").add_parser(sub)  # what isolation holds

    run = sub.add_parser(
        "run",
        help="run a program in the sandbox (emulated device or CUDA reference), with a budget",
        description="Run a Python program from a scratch copy of --root, isolated, stopping "
        "cleanly after --steps optimizer steps (or --steps forward calls for inference), and "
        "report its losses, counters and any error as text or JSON.",
        epilog="examples:\n"
        "  torchport run --target tpu -- python train.py --lr 0.1\n"
        "  torchport run --reference --steps 5 -f json -- python -m mypkg.train\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    how = run.add_mutually_exclusive_group()
    how.add_argument(
        "--target",
        "-t",
        choices=[*EMULATED, "accelerator"],
        help="run on the emulated device (accelerator: plain CPU torch)",
    )
    how.add_argument(
        "--reference",
        action="store_true",
        help="run unmodified CUDA code on the CPU through the reference shim",
    )
    run.add_argument("--root", default=".", help="the program's folder (default: .)")
    add_run_budget(run, default_steps=RUN_STEPS)
    run.add_argument("--seed", type=seed, default=0, help=f"0 to {MAX_SEED} (default: 0)")
    run.add_argument("--format", "-f", choices=["text", "json"], default="text")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- python SCRIPT [ARGS]")
    run.set_defaults(func=_cmd_run)

    r = sub.add_parser(
        "rules",
        help="list the rule catalogue, or show one rule's documentation",
        description="Without CODE: one line per rule. With CODE (e.g. TPD001 or cuda-method): "
        "the rule's full documentation and per-target fixes.",
    )
    r.add_argument("code", nargs="?", help="a rule code or name")
    r.add_argument("--category", help="only rules of this category")
    r.add_argument("--format", choices=["text", "json"], default="text")
    r.set_defaults(func=_cmd_rules)
    return parser


def _progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rscanning: {done}/{total} files")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _cmd_scan(args: argparse.Namespace) -> int:
    options = ScanOptions(
        target=args.target,
        select=tuple(c for c in (args.select or "").split(",") if c.strip()),
        max_bytes=args.max_file_size,
        jobs=args.jobs,
        prefilter=not args.no_prefilter,
    )
    if options.select and not load_catalogue().select(list(options.select)):
        return _error(f"--select {args.select!r} matches no rule (see `torchport rules`)")
    show_progress = not args.quiet and sys.stderr.isatty()
    try:
        result = scan(args.path, options, progress=_progress if show_progress else None)
    except ScanError as exc:
        return _error(str(exc))
    report = FORMATS[args.format](result)
    if args.output:
        try:
            atomic_write(Path(args.output), report, errors=PRINTABLE_ERRORS)
        except OSError as exc:
            return _error(f"cannot write {args.output}: {exc.strerror or exc}")
        if not args.quiet:
            print(f"{len(result.findings)} findings written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(report)
    return EXIT_FINDINGS if result.findings and not args.exit_zero else EXIT_CLEAN


def _cmd_run(args: argparse.Namespace) -> int:
    from torchport.sandbox.harness import RunError, RunSpec, run

    from .data_notes import data_notes

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    mode = "reference" if args.reference else (args.target if args.target in EMULATED else "plain")
    spec = RunSpec(
        root=Path(args.root).resolve(),
        command=command,
        mode=mode,
        steps=args.steps,
        forwards=args.steps,
        seed=args.seed,
        devices=args.devices,
        timeout_s=args.timeout,
        memory_mb=args.memory,
        isolation=args.isolation,
    )
    try:
        result = run(spec)
    except RunError as exc:
        return _error(str(exc))
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(
            f"{result.status} ({mode}, isolation: {result.isolation or 'none'}, "
            f"{result.elapsed_s:.1f}s): {result.steps} steps, {len(result.losses)} losses"
        )
        if result.losses:
            shown = ", ".join(f"{x:.6g}" for x in result.losses[:10])
            print(f"losses: {shown}{' ...' if len(result.losses) > 10 else ''}")
        for note in data_notes(result.to_json()):
            print(terminal_line(note))
        if result.error:  # the program's own words: one line, no escape sequences
            frame = result.error.get("frame") or {}
            where = f" at {frame.get('file')}:{frame.get('line')}" if frame else ""
            print(terminal_line(f"error: {result.error['type']}: {result.error['message']}{where}"))
    return EXIT_CLEAN if result.status == "ok" else EXIT_FINDINGS


def _cmd_rules(args: argparse.Namespace) -> int:
    catalogue = load_catalogue()
    if args.code:
        rule = catalogue.get(args.code)
        if rule is None:
            return _error(f"no rule {args.code!r}; `torchport rules` lists them")
        if args.format == "json":
            import json

            print(
                json.dumps(
                    {
                        "code": rule.code,
                        "name": rule.name,
                        "title": rule.title,
                        "category": rule.category,
                        "severity": rule.severity.value,
                        "message": rule.message,
                        "fix": {t: f.to_json() for t, f in rule.fixes.items()},
                        "doc": rule.doc,
                    },
                    indent=2,
                )
            )
            return EXIT_CLEAN
        print(rule.doc.rstrip() if rule.doc else f"{rule.code} {rule.name}: {rule.title}")
        print()
        print("Fix per target:")
        for target, fix in rule.fixes.items():
            print(
                textwrap.fill(
                    f"{target:<12} {fix.kind.value:<7} {fix.hint}",
                    width=100,
                    subsequent_indent=" " * 21,
                )
            )
        return EXIT_CLEAN
    rules = [r for r in catalogue if not args.category or r.category == args.category]
    if args.format == "json":
        import json

        print(
            json.dumps(
                [
                    {
                        "code": r.code,
                        "name": r.name,
                        "title": r.title,
                        "category": r.category,
                        "severity": r.severity.value,
                        "fix": {t: f.kind.value for t, f in r.fixes.items()},
                    }
                    for r in rules
                ],
                indent=2,
            )
        )
        return EXIT_CLEAN
    print(f"{'code':<7} {'severity':<8} {'category':<14} {'tpu/neuron/xla/accel':<28} title")
    for r in rules:
        kinds = "/".join(r.fixes[t].kind.value for t in TARGETS)
        print(f"{r.code:<7} {r.severity.value:<8} {r.category:<14} {kinds:<28} {r.title}")
    print(f"\n{len(rules)} rules; `torchport rules CODE` shows one rule's documentation.")
    return EXIT_CLEAN


def _error(message: str) -> int:
    return fail(message)


# What a shell reports for a program that SIGPIPE ended (`cat file | head -1`): the
# reader left early, which is not an error of ours, but the output is incomplete.
EXIT_BROKEN_PIPE = 128 + 13


def _printable_output() -> None:
    """A file name that is not UTF-8 shows as ``\\xNN`` on our output instead of ending
    the command with UnicodeEncodeError (a strict UTF-8 locale, or a pipe)."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=PRINTABLE_ERRORS)


def _quiet_broken_pipe() -> int:
    """The reader closed our standard output (``| head``): Python's documented recipe,
    point stdout at devnull so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_BROKEN_PIPE


def main(argv: list[str] | None = None) -> int:
    hide_own_secrets()  # before anything runs: programs of our user cannot read our keys
    _printable_output()
    try:
        status = _run(argv)
        sys.stdout.flush()  # a reader that left shows up here, not at the interpreter's exit
        return status
    except BrokenPipeError:
        return _quiet_broken_pipe()


def _run(argv: list[str] | None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad option (already said)
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return args.func(args)
    except CatalogueError as exc:
        return _error(f"rule catalogue is broken: {exc}")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
