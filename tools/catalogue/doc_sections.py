"""One target's part of a rule's documentation.

Every rule's doc (``docs/<CODE>.md``) has sections of per-target bullets, ``- **tpu**
(manual): ...`` or several targets at once (``- **tpu** (auto), **neuron** (auto): ...``),
which ``scripts/new_rule.py`` writes and ``tests/test_catalogue.py`` checks. A person
asking about one construct cares about one target: chat's ``/explain FILE:LINE`` shows
why it breaks there and how it is fixed there, not all four.
"""

from __future__ import annotations

import re

_SECTION = re.compile(r"^##\s+(.*\S)\s*$")
_NAMED = r"\*\*([\w-]+)\*\*(?: \(([\w-]+)\))?"
# the targets a bullet is about, then what it says about them
_HEAD = re.compile(rf"^((?:{_NAMED}(?:,\s*|\s+and\s+)?)+)(.*)$", re.DOTALL)


def _bullets(doc: str) -> list[tuple[str, str]]:
    """(section title, bullet text on one line) for every ``- `` bullet of the doc."""
    found: list[tuple[str, list[str]]] = []
    section, open_bullet = "", False
    for line in doc.splitlines():
        if heading := _SECTION.match(line):
            section, open_bullet = heading.group(1), False
        elif line.startswith("- "):
            found.append((section, [line[2:].strip()]))
            open_bullet = True
        elif open_bullet and line.startswith((" ", "\t")) and line.strip():
            found[-1][1].append(line.strip())
        else:
            open_bullet = False
    return [(title, " ".join(parts)) for title, parts in found]


def target_notes(doc: str, target: str) -> dict[str, str]:
    """``{section title: what its bullet says about target}``, for the sections with a
    bullet naming ``target`` (``Why it breaks``, ``How it is fixed``); the fix kind the
    bullet gives the target (``(manual)``) stays in front."""
    notes: dict[str, str] = {}
    for section, text in _bullets(doc):
        head = _HEAD.match(text)
        if head is None:
            continue
        kinds = dict(re.findall(_NAMED, head.group(1)))
        if target in kinds and section not in notes:
            kind = f"({kinds[target]}) " if kinds[target] else ""
            notes[section] = kind + head.group(4).lstrip(":, ")
    return notes


def _named(doc: str, section: str) -> set[str]:
    """The targets the bullets of ``section`` name."""
    named: set[str] = set()
    for title, text in _bullets(doc):
        head = _HEAD.match(text) if title == section else None
        if head is not None:
            named |= {name for name, _ in re.findall(_NAMED, head.group(1))}
    return named


def _append_to_section(doc: str, section: str, bullets: list[str]) -> str:
    """``doc`` with ``bullets`` after the last line of ``## section`` (before its blank
    lines and the next heading)."""
    lines = doc.split("\n")
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f"## {section}"), None)
    if start is None or not bullets:
        return doc
    end = next((i for i in range(start + 1, len(lines)) if _SECTION.match(lines[i])), len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return "\n".join([*lines[:end], *bullets, *lines[end:]])


def with_target_bullets(doc: str, message: str, fixes: dict[str, tuple[str, str, str]]) -> str:
    """The doc with a bullet generated from the target's profile and the rule's data for
    every target its ``Why it breaks`` / ``How it is fixed`` sections do not name: a
    target added as a profile (tools/data/targets.toml, or TORCHPORT_TARGET_PROFILES) is
    documented in every rule without editing a hundred pages. ``fixes`` maps a target to
    (its title, its fix kind, the fix's hint)."""
    if not doc:
        return doc
    why = [
        f"- **{target}**: on {title}: {message}"
        for target, (title, _, _) in fixes.items()
        if target not in _named(doc, "Why it breaks")
    ]
    how = [
        f"- **{target}** ({kind}): {hint or 'see the rule message'}"
        for target, (_, kind, hint) in fixes.items()
        if target not in _named(doc, "How it is fixed")
    ]
    return _append_to_section(_append_to_section(doc, "Why it breaks", why), "How it is fixed", how)


FIX_CHANGES = "What the fix may change"


def fix_changes_line(applicability: dict[str, str], why: str) -> str:
    """``What the fix may change: numerics — <why>`` for a rule's automatic fixes, from
    tools/catalogue/applicability.toml (``applicability`` maps each target with an
    automatic fix to its declared kind): generated, so a page never says a fix is safe
    where the table that ``--safe-only`` reads says otherwise. Targets that agree are
    merged, ``numerics (tpu, neuron, xla); safe (accelerator)`` where they do not; an
    empty string where no target's fix is automatic."""
    by_kind: dict[str, list[str]] = {}
    for target, kind in applicability.items():
        by_kind.setdefault(kind, []).append(target)
    if not by_kind:
        return ""
    if len(by_kind) == 1:
        kinds = next(iter(by_kind))
    else:
        kinds = "; ".join(f"{kind} ({', '.join(ts)})" for kind, ts in by_kind.items())
    return f"{FIX_CHANGES}: {kinds} — {why}"


def with_fix_changes(doc: str, line: str) -> str:
    """The doc with ``line`` as a paragraph closing its ``How it is fixed`` section."""
    return _append_to_section(doc, "How it is fixed", ["", line]) if line else doc
