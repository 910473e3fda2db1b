"""The catalogue's fix kinds and the registered codemods must say the same thing.

A rule's ``auto`` in the TOML is a promise that a codemod runs; a codemod registered
where the TOML says ``manual``, ``llm`` or ``none`` never runs (only ``auto`` findings
reach the engine). Either mismatch is a bug that ships silently, so the codemods
package checks both directions as soon as its registries are built. The check lives
here, not in ``tools.catalogue``, because the codemods depend on the catalogue and
not the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..catalogue import Catalogue, CatalogueError, FixKind


def fixer_mismatches(
    catalogue: Catalogue, python_fixers: Iterable[tuple[str, str]], text_fixers: Iterable[str]
) -> list[str]:
    """Every disagreement, one line each naming the rule and target: Python codemods per
    (rule, target) for rules with a Python match; text codemods per rule (they decide per
    target themselves) for rules with text patterns."""
    registered = set(python_fixers)
    python_codes = {code for code, _ in registered}
    text = set(text_fixers)
    problems = [
        f"{code}: a codemod is registered but the catalogue has no such rule"
        for code in sorted(python_codes | text)
        if code not in catalogue.by_code
    ]
    for rule in catalogue:
        for target, fix in rule.fixes.items() if rule.match else ():
            has = (rule.code, target) in registered
            if fix.kind is FixKind.AUTO and not has:
                problems.append(f"{rule.code}/{target}: auto in the catalogue, no codemod")
            elif has and fix.kind is not FixKind.AUTO:
                problems.append(
                    f"{rule.code}/{target}: a codemod is registered but the catalogue says"
                    f" {fix.kind.value}: it would never run"
                )
        if rule.code in python_codes and not rule.match:
            problems.append(f"{rule.code}: a Python codemod for a rule without a Python match")
        auto_text = any(f.kind is FixKind.AUTO for f in rule.fixes_for(in_text=True).values())
        if rule.text_patterns and auto_text and rule.code not in text:
            problems.append(f"{rule.code}: auto in text files, no text codemod")
        elif rule.code in text and not (rule.text_patterns and auto_text):
            problems.append(f"{rule.code}: a text codemod for a rule with no auto text fix")
    return problems


def check_fixers(
    catalogue: Catalogue, python_fixers: Iterable[tuple[str, str]], text_fixers: Iterable[str]
) -> None:
    """Raise ``CatalogueError`` listing every mismatch, so a bad pair never loads."""
    problems = fixer_mismatches(catalogue, python_fixers, text_fixers)
    if problems:
        raise CatalogueError("catalogue and codemods disagree:\n  " + "\n  ".join(problems))
