"""``torchport config``: the settings that apply to a repository, and where each came from
(torchport's default, the repository's file, an environment variable, a flag)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from torchport.agents.defaults import VERIFY_STEPS
from torchport.agents.project_config import SEVERITIES
from torchport.tools.catalogue import TARGETS
from torchport.tools.safetext import terminal_line

from .options import (
    EXIT_CLEAN,
    BuiltIn,
    add_deps_mode,
    add_exclude,
    add_keep_args,
    add_tolerance,
    apply_project_config,
    fail,
    steps,
)

EPILOG = """\
where settings come from, each overriding the one before:
  default      torchport's own
  FILE         [tool.torchport] in the repository's pyproject.toml, or its torchport.toml
               (both at once is an error: keep one)
  TORCHPORT_*  TORCHPORT_TARGET, TORCHPORT_ENTRY, TORCHPORT_STEPS, TORCHPORT_EXCLUDE,
               TORCHPORT_SKIP (comma-separated lists), TORCHPORT_TOLERANCE, TORCHPORT_DEPS,
               TORCHPORT_BASELINE, TORCHPORT_FAIL_ON
  flags        --target, --entry, --steps, --exclude, --skip, --tolerance, --deps,
               --baseline, --fail-on (each command has those that concern it)
exclude and skip add up across the layers instead (an exclude '!PATTERN' takes a file
back); a tolerance name given later keeps the file's per-policy numbers.

example pyproject.toml:
  [tool.torchport]
  target = "tpu"
  entry = "python train.py --epochs 1"
  steps = 3
  exclude = ["third_party/", "*_cuda_only.py"]
  skip = ["TPP"]                      # rule codes or prefixes
  tolerance = "bf16"                  # or a table: [tool.torchport.tolerance]
  deps = "requirements-port.txt"      # auto | none | a file in the repository
  baseline = ".torchport-baseline.json"   # scan: findings accepted (a file in it)
  fail-on = "warning"                 # scan: the least severity that fails

examples:
  torchport config repo/              what migrate, chat and scan would use there
  torchport config repo/ --steps 2 -f json
"""


def add_parser(sub: Any) -> None:
    c = sub.add_parser(
        "config",
        help="show the settings that apply to a repository, and where each came from",
        description="Print the effective settings for the repository at PATH (target, "
        "entry, steps, keep-args, exclude, skip, tolerance, deps, baseline, fail-on) and the "
        "source of each: torchport's default, the repository's [tool.torchport] or "
        "torchport.toml, a TORCHPORT_* environment variable, or a flag given here as it would "
        "be to migrate.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("path", nargs="?", default=".", help="the repository (default: .)")
    c.add_argument("--format", "-f", choices=["text", "json"], default="text")
    c.add_argument("--target", "-t", choices=TARGETS, help="where the code goes")
    c.add_argument("--entry", metavar="CMD", help="how to run the program")
    c.add_argument("--steps", type=steps, default=BuiltIn(VERIFY_STEPS), help="steps per run")
    add_keep_args(c)
    add_exclude(c)
    add_tolerance(c)
    add_deps_mode(c)
    c.add_argument("--baseline", metavar="FILE", help="scan's accepted findings")
    c.add_argument(
        "--fail-on", choices=SEVERITIES, default=BuiltIn("info"), help="scan's failing severity"
    )
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchport.agents.config_record import shown
    from torchport.agents.project_config import SECTION, ConfigError

    root = Path(args.path)
    if not root.is_dir():
        return fail(f"{args.path}: not a folder")
    try:
        config = apply_project_config(args, root)
    except ConfigError as exc:
        return fail(str(exc))
    if args.format == "json":
        print(json.dumps(config.to_json(), indent=2))
        return EXIT_CLEAN
    file = "none"
    if config.file is not None:
        file = f"{config.file}{' ' + SECTION if config.file.name == 'pyproject.toml' else ''}"
    print(terminal_line(f"repository: {config.root}"))
    print(terminal_line(f"config file: {file}"))
    rows = [(n, terminal_line(shown(n, s.value)), s.source) for n, s in config.settings.items()]
    width = max(len(name) for name, _, _ in rows)
    value_width = min(40, max(len(value) for _, value, _ in rows))
    for name, value, source in rows:
        print(f"  {name:<{width}}  {value:<{value_width}}  {terminal_line(source)}")
    return EXIT_CLEAN
