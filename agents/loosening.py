"""How far a repository's own configuration may loosen torchport's checks, and saying so.

A repository is untrusted input, and its ``torchport.toml`` (or ``[tool.torchport]``) can
set the numbers its own verification is judged by. ``[tolerance] fp32 = {rtol = 1e30}``
once made a port whose losses were off by 1e12 ``verified``. So a repository may tighten
any check, but a looser tolerance or fewer steps than torchport's own are refused beyond
the bounds in ``data/loosening.toml`` (``check``: a ValueError naming the bound, which
``project_config`` turns into a one-line error naming the file and the key); within them,
and whatever the user's flags or ``TORCHPORT_*`` variables loosened (the user's choice,
never bounded), ``said`` puts it at the head of the verdict's reason: every front door
prints that reason on the verdict's own line.
"""

from __future__ import annotations

import importlib.resources
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import config_record
from .defaults import VERIFY_STEPS
from .verdicts import Verdict

if TYPE_CHECKING:
    from .results import Verification
    from .tolerance import Policy

BOUNDS_FILE = "agents/data/loosening.toml"
NUMBERS = ("rtol", "atol", "max_steps")  # a tolerance policy's (verifier.POLICY_FIELDS)


@dataclass(frozen=True)
class Bound:
    """One setting's bound: which way loosens it, and how far a repository may go."""

    looser: str  # "higher" (a tolerance) or "lower" (a count of steps)
    times: float = 1.0  # higher: at most this many times torchport's own value ...
    ceiling: float = math.inf  # ... and never above this
    floor: float = 0.0  # lower: at least this
    hint: str = ""  # what a refusal tells the user to do instead

    def is_looser(self, value: float, own: float) -> bool:
        return value > own if self.looser == "higher" else value < own

    def limit(self, own: float) -> float:
        """The loosest value a repository may give where torchport's own is ``own``."""
        if self.looser == "higher":
            return max(own, min(own * self.times, self.ceiling))
        return min(own, self.floor)

    def holds(self, value: float, own: float) -> bool:
        limit = self.limit(own)
        return value <= limit if self.looser == "higher" else value >= limit

    def describe(self, own: float) -> str:
        if self.looser == "higher":
            return (
                f"at most {self.limit(own):g} ({self.times:g}x torchport's {own:g}, never "
                f"above {self.ceiling:g})"
            )
        return f"at least {self.limit(own):g} (torchport's: {own:g})"


@cache
def bounds() -> dict[str, Bound]:
    text = importlib.resources.files("torchport.agents").joinpath("data/loosening.toml")
    return {
        name: Bound(**values)
        for name, values in tomllib.loads(text.read_text(encoding="utf-8")).items()
    }


def check(key: str, value: float, own: float, name: str = "") -> None:
    """ValueError when a repository's ``value`` for ``key`` loosens torchport's ``own``
    beyond the bound (``name``: how the message names the key, e.g. ``fp32.rtol``, when
    the caller's prefix does not)."""
    bound = bounds()[key]
    if not bound.holds(value, own):
        raise ValueError(
            f"{name + ' ' if name else ''}{value:g} is looser than a repository's own "
            f"configuration may make it: {bound.describe(own)}, as {BOUNDS_FILE} bounds it; "
            f"{bound.hint}"
        )


def check_tolerance(policy: str, numbers: Mapping[str, Any]) -> None:
    """A repository's numbers for ``policy`` against torchport's own for it (``check``)."""
    from .tolerance import policies  # the verifier's own table, read only when asked

    own = policies()[policy]
    for field_name, value in numbers.items():
        check(field_name, value, getattr(own, field_name), f"{policy}.{field_name}")


# --- saying what was loosened, and by whom ------------------------------------------------


@dataclass(frozen=True)
class Loosened:
    source: str  # the file, flag, variable or call that set it (config_record's words)
    what: str  # "steps 3 (torchport's: 5)"


def _tolerance_items(verification: Verification, settings: Mapping[str, Any]) -> list[Loosened]:
    """The tolerance the verdict was judged by, where looser than torchport's own: a policy
    named instead of torchport's choice, and a policy's numbers changed by the file."""
    from .tolerance import policies, policies_for

    name = verification.policy
    if not name:  # nothing was compared
        return []
    tolerance = settings.get("tolerance") or {}
    used, base = policies_for(tolerance)[name], policies()[name]
    own = policies()[verification.own_policy or name]
    items = []
    if name != own.name and _looser_anywhere(base, own):
        items.append(
            Loosened(
                config_record.policy_source(settings),
                f"tolerance policy {name} (torchport's: {own.name} for this program)",
            )
        )
    changed = [
        f"{name} {f} {getattr(used, f):g} (torchport's: {getattr(base, f):g})"
        for f in NUMBERS
        if bounds()[f].is_looser(getattr(used, f), getattr(base, f))
    ]
    if changed:
        items.append(
            Loosened(config_record.numbers_source(settings), "tolerance " + ", ".join(changed))
        )
    return items


def _looser_anywhere(policy: Policy, own: Policy) -> bool:
    return any(bounds()[f].is_looser(getattr(policy, f), getattr(own, f)) for f in NUMBERS)


def loosened(verification: Verification, settings: Mapping[str, Any]) -> list[str]:
    """What the verdict was judged under that is looser than torchport's defaults, one
    phrase per source: "this repository's own steps 3 (torchport's: 5), in torchport.toml"."""
    items = _tolerance_items(verification, settings)
    steps = int(settings.get("steps", VERIFY_STEPS))
    if steps < VERIFY_STEPS:
        source = config_record.source_of(settings, "steps")
        items.append(Loosened(source, f"steps {steps} (torchport's: {VERIFY_STEPS})"))
    by_source: dict[str, list[str]] = {}
    for item in items:
        by_source.setdefault(item.source, []).append(item.what)
    record = settings.get("configuration") or {}
    return [
        f"{_owner(source, record)} {' and '.join(whats)}, {_where(source, record)}"
        for source, whats in by_source.items()
    ]


def _owner(source: str, record: Mapping[str, Any]) -> str:
    if config_record.is_file(source, record):
        return "this repository's own"
    return "the run's" if source == "default" else "the user's"


def _where(source: str, record: Mapping[str, Any]) -> str:
    if config_record.is_file(source, record):
        return f"set in {Path(source).name}"
    if source == "default":  # a run checkpointed before its settings' sources were kept
        return "from a run that did not record where its settings came from"
    return f"set with {source}"


def said(verification: Verification, settings: Mapping[str, Any]) -> Verification:
    """``verification`` with what loosened its checks (``loosened``) in ``loosened`` and at
    the head of its reason, when its verdict is ``verified``: the claim those checks made."""
    found = loosened(verification, settings)
    if not found or verification.verdict != Verdict.VERIFIED:
        return verification
    head = "under " + "; under ".join(found)
    return replace(verification, reason=f"{head}: {verification.reason}", loosened=found)
