"""One source of truth per rule: the catalogue's fix kinds and the codemod registry are
checked against each other, and match keys against the matcher's vocabulary, by the real
load code on a small catalogue written for the test."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.catalogue import CatalogueError, load_catalogue, load_catalogue_from
from torchport.tools.codemods import FIXERS
from torchport.tools.codemods.base import fixer
from torchport.tools.codemods.consistency import check_fixers, fixer_mismatches
from torchport.tools.codemods.text import TEXT_CODEMODS

RULE = """
[[rule]]
code = "TPD901"
name = "crafted-rule"
title = "A rule written for this test"
category = "device"
severity = "warning"
message = "crafted"
match = {match}
fix = {{ all = "manual: by hand", tpu = "auto: rewritten" }}
"""


def crafted(root: Path, match: str = '{ ref = ["torch.cuda.crafted"] }'):
    """A one-rule catalogue on disk, loaded by the real loader."""
    (root / "data").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "data" / "device.toml").write_text(RULE.format(match=match), encoding="utf-8")
    (root / "docs" / "TPD901.md").write_text("# TPD901 crafted-rule\n", encoding="utf-8")
    return load_catalogue_from(root)


def registry(*targets: str) -> dict:
    into: dict = {}
    fixer("TPD901", set(targets), into=into)(lambda node, ctx: node)
    return into


def test_a_matching_pair_loads(tmp_path):
    check_fixers(crafted(tmp_path), registry("tpu"), ())


def test_a_codemod_for_a_manual_target_is_an_error(tmp_path):
    with pytest.raises(CatalogueError, match=r"TPD901/neuron: .* says manual"):
        check_fixers(crafted(tmp_path), registry("tpu", "neuron"), ())


def test_an_auto_target_without_a_codemod_is_an_error(tmp_path):
    with pytest.raises(CatalogueError, match=r"TPD901/tpu: auto in the catalogue, no codemod"):
        check_fixers(crafted(tmp_path), {}, ())


def test_a_codemod_for_an_unknown_rule_is_an_error(tmp_path):
    reg = registry("tpu")
    fixer("TPD902", {"tpu"}, into=reg)(lambda node, ctx: node)
    with pytest.raises(CatalogueError, match=r"TPD902: .* no such rule"):
        check_fixers(crafted(tmp_path), reg, ())


def test_a_text_codemod_for_a_rule_without_text_patterns_is_an_error(tmp_path):
    with pytest.raises(CatalogueError, match=r"TPD901: a text codemod for a rule with no auto"):
        check_fixers(crafted(tmp_path), registry("tpu"), {"TPD901"})


def test_an_unknown_match_key_is_a_load_error_naming_rule_and_key(tmp_path):
    with pytest.raises(CatalogueError, match=r"TPD901: unknown match key\(s\) \['refs'\]"):
        crafted(tmp_path, match='{ refs = ["torch.cuda.crafted"] }')


def test_the_shipped_catalogue_and_codemods_agree():
    assert fixer_mismatches(load_catalogue(), FIXERS, TEXT_CODEMODS) == []
