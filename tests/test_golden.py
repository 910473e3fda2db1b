"""Golden pairs: every auto rule, every target, byte for byte (see tests/golden.py)."""

from __future__ import annotations

import pytest
from golden import expected_path, inputs, migrate_file
from torchport.tools.catalogue import TARGETS, load_catalogue

CASES = [(path, target) for path in inputs() for target in TARGETS]


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_output_matches_the_golden_file(path, target):
    assert migrate_file(path, target) == expected_path(path, target).read_text(encoding="utf-8")


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_migrating_the_output_again_changes_nothing(path, target):
    once = expected_path(path, target)
    assert migrate_file(once, target) == once.read_text(encoding="utf-8")


def test_every_auto_rule_has_a_golden_input():
    """(That it has a codemod per auto target is checked when tools.codemods is imported:
    tests/test_fixer_consistency.py.)"""
    have = {p.stem for p in inputs()}
    auto = {
        rule.code
        for rule in load_catalogue()
        if rule.match and any(f.kind.value == "auto" for f in rule.fixes.values())
    }
    assert sorted(auto - have) == []
