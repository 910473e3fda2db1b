"""Command-line options the front doors share (migrate, chat, batch, eval, run, scan),
defined once so that their names, defaults, help and accepted ranges read the same
everywhere.

Every number is range-checked by its argparse ``type``, so a bad value is argparse's
one-line error with exit 2, before anything is created (a run folder, a cgroup, an
output). The sandbox's limits take their ranges from ``sandbox.limits``, which the
sandbox itself checks again.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from torchport.agents.defaults import MAX_ITERATIONS, MAX_LLM_TOKENS, VERIFY_STEPS
from torchport.agents.llm.config import LLMConfigError, check_flag
from torchport.sandbox.limits import (
    DEFAULT_DEVICES,
    DEFAULT_ISOLATION,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    LIMITS,
    Bound,
)
from torchport.tools.safetext import terminal_line

if TYPE_CHECKING:
    from torchport.agents.project_config import Overrides, ProjectConfig

# Every front door's exit statuses: done and nothing found, done with findings (or a run
# that failed), nothing done (bad input or option).
EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

ISOLATION = ["auto", "bwrap", "docker", "unshare", "process"]
LLM_FLAGS = "none|local|auto|URL"
LLM_HELP = (
    "none: rules only; local: the embedded model; URL: an OpenAI-compatible endpoint; "
    "auto: TORCHPORT_LLM_BASE_URL if set, else local if installed, else none"
)
# Below this a Python that imports torch cannot start: the run would only be killed.
MIN_MEMORY_MB = 64


@dataclasses.dataclass(frozen=True)
class BuiltIn:
    """An option's built-in default, told apart from the same value given as a flag: the
    project's config and ``TORCHPORT_*`` variables override a default, never a flag
    (``OneLineParser`` turns it back into the plain value once the command line is read)."""

    value: Any

    def __str__(self) -> str:
        return str(self.value)


def _no_default(default: Any) -> bool:
    """A default that means "not given" (None, a switch's False) says nothing in --help."""
    return default is None or default is argparse.SUPPRESS or default in (False, True, [])


class _ShowDefaults(argparse.HelpFormatter):
    """Every option's default said in ``--help`` (an option whose help already says it,
    or whose default means "not given", says nothing more); a required option says so."""

    def _format_action(self, action: argparse.Action) -> str:
        if action.help is None and not _no_default(action.default):
            action = copy.copy(action)  # argparse shows nothing for an option without help
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required and action.option_strings and "required" not in text:
            text += " (required)"
        said = _no_default(action.default) or "default" in text
        if not said and (action.option_strings or action.nargs in ("?", "*")):
            text += " (default: %(default)s)"
        return text


class HelpFormatter(_ShowDefaults, argparse.HelpFormatter):
    pass


class RawDescriptionHelpFormatter(_ShowDefaults, argparse.RawDescriptionHelpFormatter):
    """Epilogs as written (tables, examples); a one-paragraph description still wrapped."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text.strip():
            return argparse.HelpFormatter._fill_text(self, text, width, indent)
        return super()._fill_text(text, width, indent)


# What a command asks for -> what it gets: the same layout, with the defaults said.
_FORMATTERS = {
    argparse.HelpFormatter: HelpFormatter,
    argparse.RawDescriptionHelpFormatter: RawDescriptionHelpFormatter,
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a bad option reported as the one line ``torchport CMD: error: ...``
    (exit 2) that every other error of the front doors is, not the usage block above it;
    ``--help`` still shows the usage, and every option's default (``_ShowDefaults``).
    Subcommands' parsers inherit it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        formatter = kwargs.get("formatter_class", argparse.HelpFormatter)
        kwargs["formatter_class"] = _FORMATTERS.get(formatter, formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """Parsed options hold plain values: each ``BuiltIn`` default is replaced by its
        value, and which they were is kept in ``builtin_defaults`` (name -> value): what
        ``apply_project_config`` may override."""
        parsed, rest = super().parse_known_args(args, namespace)
        builtin = {k: v.value for k, v in vars(parsed).items() if isinstance(v, BuiltIn)}
        for name, value in builtin.items():
            setattr(parsed, name, value)
        parsed.builtin_defaults = {**getattr(parsed, "builtin_defaults", {}), **builtin}
        return parsed, rest


def in_range(bound: Bound) -> Callable[[str], int | float]:
    """An argparse ``type`` that reads a number and refuses it outside ``bound``."""

    def parse(text: str) -> int | float:
        try:
            value = (int if bound.integer else float)(text)
        except ValueError:
            value = None
        if value is None or not bound.holds(value):
            raise argparse.ArgumentTypeError(f"must be {bound.describe()}, not {text!r}")
        return value

    return parse


positive_int = in_range(Bound(1))
non_negative_int = in_range(Bound(0))
steps = in_range(LIMITS["steps"])
seconds = in_range(LIMITS["timeout_s"])
mebibytes = in_range(dataclasses.replace(LIMITS["memory_mb"], low=MIN_MEMORY_MB))
devices = in_range(LIMITS["devices"])
seed = in_range(LIMITS["seed"])


def llm_flag(text: str) -> str:
    """An argparse ``type`` for --llm: none, local, auto, or an http(s) URL with a host."""
    try:
        return check_flag(text)
    except LLMConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_run_budget(
    group: Any, what: str = "per run", default_steps: int = VERIFY_STEPS, deps: bool = False
) -> None:
    """--steps, --timeout, --memory, --isolation, --devices: how each sandboxed run is
    bounded and what machine it sees; with ``deps``, --deps and --python too: what each
    verification's runs have installed."""
    group.add_argument(
        "--steps",
        type=steps,
        default=BuiltIn(default_steps),
        help="optimizer steps (or forward calls) per run, at least 1",
    )
    group.add_argument(
        "--timeout",
        type=seconds,
        default=DEFAULT_TIMEOUT_S,
        help=f"{what}, seconds (above 0, at most {LIMITS['timeout_s'].high})",
    )
    group.add_argument(
        "--memory",
        type=mebibytes,
        default=DEFAULT_MEMORY_MB,
        help=f"{what}, MiB (at least {MIN_MEMORY_MB})",
    )
    group.add_argument(
        "--isolation",
        choices=ISOLATION,
        default=DEFAULT_ISOLATION,
        help="sandbox backend (auto: the strongest available)",
    )
    group.add_argument(
        "--devices",
        type=devices,
        default=DEFAULT_DEVICES,
        help="what device_count() answers in both runs, so a program that spawns one rank "
        f"per device spawns that many (default: {DEFAULT_DEVICES})",
    )
    add_keep_args(group)
    if deps:
        add_deps(group)


def add_keep_args(group: Any) -> None:
    """--keep-args: the program's command as given, nothing lowered for a short run."""
    group.add_argument(
        "--keep-args",
        action="store_true",
        default=BuiltIn(False),
        help="run the program's command as given: no size or time argument (epochs, batch "
        "size, image size, ...) lowered for a short run (the project's `keep-args`)",
    )


def deps_flag(text: str) -> str:
    """An argparse ``type`` for --deps: auto, none, or a requirements file that exists."""
    from torchport.agents.environment import deps_flag as check

    try:
        return check(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def python_flag(text: str) -> str:
    """An argparse ``type`` for --python: an interpreter the runs can use, or why not."""
    from torchport.agents.environment import InterpreterError, user_interpreter

    try:
        user_interpreter(text)
    except InterpreterError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_deps(group: Any) -> None:
    """--deps and --python: which dependencies the verification's runs get."""
    add_deps_mode(group)
    group.add_argument(
        "--python",
        type=python_flag,
        metavar="PATH",
        help="an interpreter whose installed packages the runs may use (after torchport's "
        "own; same Python and torch minor release as torchport's, else refused with why)",
    )


def add_deps_mode(group: Any) -> None:
    """--deps: which dependencies the verification's runs get (installed before them)."""
    group.add_argument(
        "--deps",
        type=deps_flag,
        default=BuiltIn("auto"),
        metavar="auto|none|FILE",
        help="auto: install what the repository declares or imports and torchport lacks "
        "(wheels only, cached; PIP_FIND_LINKS/PIP_NO_INDEX point pip at a wheel folder); "
        "none: install nothing; FILE: install that requirements file instead",
    )


def add_llm(group: Any, default: str, note: str = "") -> None:
    """--llm, with the front door's own default said in its help."""
    group.add_argument(
        "--llm",
        type=llm_flag,
        default=default,
        metavar=LLM_FLAGS,
        help=f"{LLM_HELP} (default: {default}{note})",
    )


def add_agent_limits(group: Any, per: str) -> None:
    """--max-iterations and --max-llm-tokens: how far the repair loop may go."""
    group.add_argument(
        "--max-iterations",
        type=non_negative_int,
        default=MAX_ITERATIONS,
        help="repair rounds after the first verification (0: none)",
    )
    group.add_argument(
        "--max-llm-tokens",
        type=non_negative_int,
        default=MAX_LLM_TOKENS,
        help=f"LLM token budget {per}",
    )


def fail(message: str) -> int:
    """Say what is wrong on standard error, on one line with no escape sequences (it may
    quote a path); the exit status for 'nothing was done'."""
    print(f"torchport: error: {terminal_line(message)}", file=sys.stderr)
    return EXIT_ERROR


def budget_settings(args: Any) -> dict[str, Any]:
    """The graph settings of ``add_run_budget``'s options."""
    return {
        "steps": args.steps,
        "timeout_s": args.timeout,
        "memory_mb": args.memory,
        "isolation": args.isolation,
        "devices": args.devices,
        "keep_args": bool(getattr(args, "keep_args", False)),
        **({"deps": args.deps, "python": args.python} if hasattr(args, "deps") else {}),
        **({"tolerance": args.tolerance} if hasattr(args, "tolerance") else {}),
        # which file was applied, and each value's source (agents.config_record)
        **({"configuration": args.configuration} if hasattr(args, "configuration") else {}),
    }


def tolerance_flag(text: str) -> str:
    """An argparse ``type`` for --tolerance: auto or a policy of the verifier's table."""
    from torchport.agents.tolerance import policies

    if text != "auto" and text not in policies():
        names = ", ".join(("auto", *policies()))
        raise argparse.ArgumentTypeError(f"must be one of {names}, not {text!r}")
    return text


def add_exclude(group: Any) -> None:
    """--exclude and --skip: the files and rules a command leaves alone (and the
    project's ``exclude``/``skip``, which they add to)."""
    group.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="leave out files matching GLOB (gitignore syntax, relative to the repository's "
        "root; repeatable; added to the project's `exclude`): neither reported nor rewritten",
    )
    group.add_argument(
        "--skip",
        action="append",
        metavar="CODES",
        help="comma-separated rule codes or prefixes neither reported nor applied (repeatable; "
        "added to the project's `skip`)",
    )


def add_tolerance(group: Any) -> None:
    """--tolerance: which parity policy the verifier judges by."""
    group.add_argument(
        "--tolerance",
        type=tolerance_flag,
        default=BuiltIn("auto"),
        metavar="auto|fp32|bf16",
        help="the verifier's tolerance policy (agents/data/tolerance.toml); auto: bf16 when "
        "the migrated code computes in reduced precision, else fp32",
    )


def project_overrides(args: argparse.Namespace) -> Overrides:
    """What overrides a repository's own settings for this command: ``TORCHPORT_*``, then
    the flags given; with the command's built-in defaults (``BuiltIn``) for the rest.
    Raises ConfigError for a bad variable."""
    from torchport.agents.project_config import KEYS, overrides

    attrs = {name: key.attr for name, key in KEYS.items() if hasattr(args, key.attr)}
    builtin = getattr(args, "builtin_defaults", {})
    flags = {n: getattr(args, a) for n, a in attrs.items() if a not in builtin}
    return overrides(
        flags=flags, defaults={n: builtin[a] for n, a in attrs.items() if a in builtin}
    )


def apply_project_config(args: argparse.Namespace, root: Path | None) -> ProjectConfig:
    """Settle the project's settings into ``args``: for every setting the command has an
    option for, the built-in default, the repository's file at ``root``, ``TORCHPORT_*``
    and the flag, in that order (``agents.project_config``). Raises ConfigError."""
    from torchport.agents.config_record import record
    from torchport.agents.project_config import KEYS, resolve

    config = resolve(root, project_overrides(args))
    for name, setting in config.settings.items():
        if hasattr(args, KEYS[name].attr):
            setattr(args, KEYS[name].attr, setting.value)
    args.configuration = record(config)  # said by every front door, carried in the settings
    return config
