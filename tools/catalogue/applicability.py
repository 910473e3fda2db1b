"""What each automatic fix may change, read from ``applicability.toml``.

ruff marks each fix safe or unsafe so a user can take the safe ones blind and review the
rest; a port has the same split, with two kinds of unsafe: an fp16 -> bf16 autocast runs
the same steps with other numbers, a timer rewritten to a host clock does something else.
The migration applies all of them by default and reports the unsafe ones under their own
heading; ``--safe-only`` applies the safe ones alone.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources

from ..targets import KINDS, profile
from .model import TARGETS, FixKind, Rule


class Applicability(StrEnum):
    """What applying a fix may change (the file's header says what each means)."""

    SAFE = "safe"
    NUMERICS = "numerics"
    BEHAVIOUR = "behaviour"


@dataclass(frozen=True)
class Declared:
    applicability: Applicability
    why: str


class ApplicabilityError(ValueError):
    """The table is malformed or misses a rule's fix: found at load, never at a user's run."""


# Rules outside the catalogue whose edits the migration lists: ``async=`` renamed
# ``non_blocking=`` so a PyTorch 0.3 file parses (tools.legacy_keyword).
OUTSIDE_CATALOGUE = {
    "async-keyword": Declared(Applicability.SAFE, "async= is the old name of non_blocking=")
}


@functools.cache
def declared() -> dict[str, dict[str, Declared]]:
    """Rule code -> target -> what its fix may change."""
    text = resources.files(__package__).joinpath("applicability.toml").read_text("utf-8")
    return parse(tomllib.loads(text))


def parse(data: dict) -> dict[str, dict[str, Declared]]:
    table: dict[str, dict[str, Declared]] = {}
    for code, entry in data.items():
        unknown = set(entry) - {"applicability", "why", *TARGETS, *KINDS}
        if unknown or not entry.get("why"):
            raise ApplicabilityError(f"{code}: unknown keys {sorted(unknown)} or no why")
        table[code] = {
            target: Declared(_kind(code, _value(entry, target)), entry["why"]) for target in TARGETS
        }
    return table


def _value(entry: dict, target: str) -> object:
    """The target's own key, else its kind's (``vendor``, ``agnostic``), else the rule's."""
    kind = profile(target).kind
    return entry.get(target, entry.get(kind, entry.get("applicability")))


def _kind(code: str, value: object) -> Applicability:
    try:
        return Applicability(str(value))
    except ValueError:
        choices = ", ".join(a.value for a in Applicability)
        raise ApplicabilityError(f"{code}: {value!r} is not one of {choices}") from None


def of(rule: str, target: str) -> Declared:
    """What ``rule``'s fix for ``target`` may change; a rule missing from the table is
    treated as behaviour-changing, never as safe (the catalogue's test refuses that case)."""
    if rule in OUTSIDE_CATALOGUE:
        return OUTSIDE_CATALOGUE[rule]
    found = declared().get(rule, {}).get(target)
    return found or Declared(Applicability.BEHAVIOUR, "its fix does not say what it may change")


def undeclared(rules: list[Rule]) -> list[str]:
    """``CODE target`` for each automatic fix the table does not cover."""
    table = declared()
    return [
        f"{rule.code} {target}"
        for rule in rules
        for target, fix in {**rule.fixes, **rule.text_fixes}.items()
        if fix.kind == FixKind.AUTO and target not in table.get(rule.code, {})
    ]
