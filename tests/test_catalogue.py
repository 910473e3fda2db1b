"""The catalogue as data: complete, consistent, documented."""

from __future__ import annotations

import re

import pytest
from torchport.tools.catalogue import CATEGORIES, TARGETS, FixKind, load_catalogue
from torchport.tools.catalogue.doc_sections import (
    fix_changes_line,
    target_notes,
    with_fix_changes,
)
from torchport.tools.pycustom import CUSTOM_MATCHERS

CATALOGUE = load_catalogue()
REQUIRED_CATEGORIES = set(CATEGORIES)


def test_catalogue_size_and_coverage():
    # the shipped count: a data file that stops loading, or a rule dropped, fails here
    assert len(CATALOGUE) >= 91
    assert {r.category for r in CATALOGUE} == REQUIRED_CATEGORIES


def test_codes_are_stable_shaped_and_unique():
    codes = [r.code for r in CATALOGUE]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"TP[A-Z]\d{3}", c) for c in codes)
    names = [r.name for r in CATALOGUE]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", list(CATALOGUE), ids=lambda r: r.code)
def test_every_rule_is_documented_with_the_kinds_it_declares(rule):
    doc = rule.doc
    assert doc.startswith(f"# {rule.code} {rule.name}"), "doc title names code and name"
    for section in ("## What it finds", "## Why it breaks", "## How it is fixed", "## Example"):
        assert section in doc
    for target in TARGETS:
        kind = rule.fixes[target].kind.value
        assert f"**{target}** ({kind})" in doc, f"doc states {target}'s fix kind as {kind}"


@pytest.mark.parametrize("rule", list(CATALOGUE), ids=lambda r: r.code)
def test_each_targets_part_of_a_rules_doc_can_be_shown_alone(rule):
    """chat's /explain FILE:LINE shows one target's bullets (``target_notes``)."""
    for target in TARGETS:
        notes = target_notes(rule.doc, target)
        assert {"Why it breaks", "How it is fixed"} <= set(notes), (target, notes)
        kind = rule.fixes[target].kind.value
        assert notes["How it is fixed"].startswith(f"({kind}) ")
        assert "**" not in notes["Why it breaks"] and "\n" not in notes["How it is fixed"]


def test_target_notes_keep_a_bullets_continuation_lines_and_no_others():
    doc = (
        "## Why it breaks\n- **tpu**: first line\n  second line\n- **neuron**: other\n\n"
        "## How it is fixed\n- **tpu** (manual): do this\n\nA paragraph after.\n"
    )
    assert target_notes(doc, "tpu") == {
        "Why it breaks": "first line second line",
        "How it is fixed": "(manual) do this",
    }
    assert target_notes(doc, "neuron") == {"Why it breaks": "other"}


@pytest.mark.parametrize("rule", list(CATALOGUE), ids=lambda r: r.code)
def test_every_rule_has_a_fix_per_target_and_a_matcher(rule):
    assert set(rule.fixes) == set(TARGETS)
    assert all(isinstance(f.kind, FixKind) for f in rule.fixes.values())
    assert rule.match or rule.text_patterns
    custom = rule.match.get("custom")
    assert custom is None or custom in CUSTOM_MATCHERS


def test_select_by_prefix():
    assert {r.category for r in CATALOGUE.select(["TPA"])} == {"amp"}
    assert [r.code for r in CATALOGUE.select(["tpd001"])] == ["TPD001"]
    assert CATALOGUE.get("cuda-method").code == "TPD001"


def test_the_fix_changes_line_merges_targets_that_agree_and_closes_the_fix_section():
    same = fix_changes_line({"tpu": "safe", "neuron": "safe"}, "a device string")
    assert same == "What the fix may change: safe — a device string"
    mixed = fix_changes_line({"tpu": "numerics", "xla": "numerics", "accelerator": "safe"}, "w")
    assert mixed == "What the fix may change: numerics (tpu, xla); safe (accelerator) — w"
    assert fix_changes_line({}, "no automatic fix") == ""
    doc = "## How it is fixed\n- **tpu** (auto): x\n\n## Example\ncode\n"
    assert with_fix_changes(doc, same) == (
        "## How it is fixed\n- **tpu** (auto): x\n\n" + same + "\n\n## Example\ncode\n"
    )
    assert with_fix_changes(doc, "") == doc
