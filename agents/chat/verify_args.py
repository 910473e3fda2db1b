"""What ``/verify ARGS`` asks for: budget options, then the command that runs the program.

``/verify [--steps N] [--timeout S] [--memory MIB] [CMD ...]``: the options change the
budget of the runs, the words after them (or after ``--``) are the entry command, as
``migrate --entry`` takes it, and ``auto`` gives the choice back to the planner. Like
gdb's ``run ARGS``, what is given is kept: a later ``/verify`` with no arguments runs
the same way. The numbers are checked against the sandbox's own limits, so a bad one is
a clear message here, not a failed run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from torchport.sandbox.limits import LIMITS

USAGE = "/verify [--steps N] [--timeout S] [--memory MIB] [CMD ...|auto]"
# option -> the budget setting it changes (the chat state's, as ``budget_settings`` names them)
OPTIONS = {"--steps": "steps", "--timeout": "timeout_s", "--memory": "memory_mb"}
FLAGS = {setting: flag for flag, setting in OPTIONS.items()}
KEEP = object()  # no command given: the session's entry stays as it is


class VerifyArgsError(ValueError):
    """ARGS cannot be used; the message says which word and why."""


@dataclass
class VerifyArgs:
    budget: dict[str, Any] = field(default_factory=dict)
    entry: Any = KEEP  # KEEP, None (the planner's choice) or the command as one string


def parse(arg: str) -> VerifyArgs:
    """``arg`` (what follows ``/verify``) as budget changes and an entry command."""
    try:
        words = shlex.split(arg)
    except ValueError as exc:
        raise VerifyArgsError(f"{arg!r} does not parse: {exc}") from None
    asked = VerifyArgs()
    while words and words[0].startswith("--"):
        flag, eq, value = words.pop(0).partition("=")
        if flag == "--" and not eq:
            break  # the rest is the command, even if it starts with --
        if flag not in OPTIONS:
            raise VerifyArgsError(f"unknown option {flag}; options: {', '.join(OPTIONS)}")
        if not eq:
            if not words:
                raise VerifyArgsError(f"{flag} needs a value")
            value = words.pop(0)
        asked.budget[OPTIONS[flag]] = _number(flag, OPTIONS[flag], value)
    if words == ["auto"]:
        asked.entry = None
    elif words:
        asked.entry = shlex.join(words)
    return asked


def _number(flag: str, setting: str, text: str) -> int | float:
    bound = LIMITS[setting]
    try:
        value: int | float | None = (int if bound.integer else float)(text)
    except ValueError:
        value = None
    if value is None or not bound.holds(value):
        raise VerifyArgsError(f"{flag} must be {bound.describe()}, not {text!r}")
    return value
