"""The CUDA rule catalogue: rules as data, loaded once.

Each ``data/<category>.toml`` holds that category's rules; each rule's long
documentation is ``docs/<CODE>.md``. ``scripts/new_rule.py`` adds a rule: its TOML
table, doc, fixer stub (``tools.codemods``, checked against the fix kinds there) and
golden input. A match key outside ``MATCH_KEYS`` is a load error; a new kind of
pattern is one small matcher in ``tools.pycustom``.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable

from ..targets import KINDS, TargetProfile, profiles, shipped_names
from .doc_sections import with_target_bullets
from .model import CATEGORIES, MATCH_KEYS, TARGETS, Fix, FixKind, Rule, Severity

__all__ = [
    "CATEGORIES",
    "MATCH_KEYS",
    "TARGETS",
    "Catalogue",
    "CatalogueError",
    "Fix",
    "FixKind",
    "Rule",
    "Severity",
    "load_catalogue",
    "load_catalogue_from",
]


class CatalogueError(ValueError):
    """The rule data is malformed; raised at load time so a bad rule never ships silently."""


class Catalogue:
    def __init__(self, rules: list[Rule]) -> None:
        self.rules: tuple[Rule, ...] = tuple(sorted(rules, key=lambda r: r.code))
        self.by_code: dict[str, Rule] = {r.code: r for r in self.rules}
        self.by_name: dict[str, Rule] = {r.name: r for r in self.rules}

    def __len__(self) -> int:
        return len(self.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def get(self, code_or_name: str) -> Rule | None:
        key = code_or_name.strip()
        return self.by_code.get(key.upper()) or self.by_name.get(key.lower())

    def select(self, codes: list[str] | None) -> list[Rule]:
        """Rules whose code starts with one of ``codes`` (ruff-style prefixes), or all."""
        if not codes:
            return list(self.rules)
        prefixes = tuple(c.strip().upper() for c in codes if c.strip())
        return [r for r in self.rules if r.code.startswith(prefixes)]


# Profile fields a fix hint may name, ``{device}``: a hint keyed by kind reads right for
# each target of the kind. Other braces (``f"neuron:{...}"``) are the hint's own text.
_PLACEHOLDER = re.compile(
    r"\{(name|title|word|device|dist_backend|compile_backend|autocast_dtype)\}"
)


def _parse_fix(code: str, spec: str, profile: TargetProfile | None = None) -> Fix:
    kind, _, hint = spec.partition(":")
    if profile is not None:
        hint = _PLACEHOLDER.sub(lambda m: str(getattr(profile, m.group(1))), hint)
    try:
        return Fix(FixKind(kind.strip()), hint.strip())
    except ValueError as exc:
        raise CatalogueError(f"{code}: unknown fix kind {kind!r}") from exc


def _fixes(code: str, raw: dict[str, str], required: bool = True) -> dict[str, Fix]:
    """Each target's fix from a table keyed by target, kind (``vendor``) or ``all``: the
    target's own key wins, then its kind's, then ``all``. A shipped target must be covered;
    one added by a profile file (``TORCHPORT_TARGET_PROFILES``) that a rule does not cover
    is left for a human there. ``required=False``: a partial table (``text_fix``)."""
    unknown = sorted(set(raw) - set(TARGETS) - set(KINDS) - {"all"})
    if unknown:
        raise CatalogueError(f"{code}: fix for unknown target(s) {unknown}")
    fixes = {}
    for target, profile in profiles().items():
        spec = raw.get(target, raw.get(profile.kind, raw.get("all")))
        if spec is None and required and target in shipped_names():
            raise CatalogueError(f"{code}: no fix given for target {target!r}")
        if spec is None and required:
            spec = f"manual: no fix recorded for {profile.title}: port it by hand"
        if spec is not None:
            fixes[target] = _parse_fix(code, spec, profile)
    return fixes


def _parse_rule(table: dict, docs: dict[str, str], source: str) -> Rule:
    try:
        code = table["code"]
        fixes = _fixes(code, dict(table["fix"]))
    except KeyError as exc:
        raise CatalogueError(f"{source}: rule without {exc.args[0]!r}: {table}") from exc
    if table["category"] not in CATEGORIES:
        raise CatalogueError(f"{code}: unknown category {table['category']!r}")
    match = dict(table.get("match", {}))
    unknown_keys = sorted(set(match) - MATCH_KEYS)
    if unknown_keys:
        raise CatalogueError(f"{code}: unknown match key(s) {unknown_keys}")
    text = tuple(table.get("text", ()))
    if not match and not text:
        raise CatalogueError(f"{code}: neither a Python match nor a text pattern")
    return Rule(
        code=code,
        name=table["name"],
        title=table["title"],
        category=table["category"],
        severity=Severity(table["severity"]),
        message=table["message"],
        fixes=fixes,
        match=match,
        supersedes=tuple(table.get("supersedes", ())),
        doc=with_target_bullets(
            docs.get(code, ""),
            table["message"],
            {t: (profiles()[t].title, f.kind.value, f.hint) for t, f in fixes.items()},
        ),
        languages=tuple(table.get("languages", ("python",) if match else ())),
        text_patterns=text,
        text_fixes=_fixes(code, dict(table.get("text_fix", {})), required=False),
        scope=table.get("scope", "cuda"),
    )


@functools.cache
def load_catalogue() -> Catalogue:
    """The shipped catalogue, parsed and checked once per process."""
    return load_catalogue_from(resources.files(__name__))


def load_catalogue_from(root: Traversable) -> Catalogue:
    """A catalogue from a folder shaped like this package (``data/*.toml``, ``docs/*.md``):
    the scaffold and the tests check a copy of the rules with the real load code."""
    docs = {
        entry.name.removesuffix(".md"): entry.read_text(encoding="utf-8")
        for entry in root.joinpath("docs").iterdir()
        if entry.name.endswith(".md")
    }
    rules: list[Rule] = []
    for entry in sorted(root.joinpath("data").iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        try:
            data = tomllib.loads(entry.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise CatalogueError(f"{entry.name}: {exc}") from exc
        rules.extend(_parse_rule(t, docs, entry.name) for t in data.get("rule", []))
    seen: set[str] = set()
    for rule in rules:
        if rule.code in seen:
            raise CatalogueError(f"duplicate rule code {rule.code}")
        seen.add(rule.code)
    catalogue = Catalogue(rules)
    for rule in rules:
        unknown = [c for c in rule.supersedes if c not in catalogue.by_code]
        if unknown:
            raise CatalogueError(f"{rule.code}: supersedes unknown rule(s) {unknown}")
    return catalogue
