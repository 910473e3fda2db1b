"""Golden pairs: every auto rule, every target, byte for byte (see tests/golden.py)."""

from __future__ import annotations

import pytest
from golden import expected_path, inputs, migrate_file
from torchport.tools.catalogue import TARGETS, load_catalogue
from torchport.tools.codemods import FIXERS

CASES = [(path, target) for path in inputs() for target in TARGETS]


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_output_matches_the_golden_file(path, target):
    assert migrate_file(path, target) == expected_path(path, target).read_text(encoding="utf-8")


@pytest.mark.parametrize(("path", "target"), CASES, ids=lambda v: getattr(v, "stem", v))
def test_migrating_the_output_again_changes_nothing(path, target):
    once = expected_path(path, target)
    assert migrate_file(once, target) == once.read_text(encoding="utf-8")


def test_every_auto_rule_has_a_golden_pair_and_a_codemod():
    have = {p.stem for p in inputs()}
    for rule in load_catalogue():
        for target in TARGETS:
            if rule.fixes[target].kind.value == "auto" and rule.match:
                assert (rule.code, target) in FIXERS, f"{rule.code} has no codemod for {target}"
                assert rule.code in have, f"{rule.code} has no golden input"
