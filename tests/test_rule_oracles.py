"""Hand-written before/after oracles for the codemods, in the style of libcst's CodemodTest
(``assertCodemod``: the input and the exact expected output stated side by side).

tests/fixtures/oracles/<family>.toml holds, for each rule family of the catalogue
(tools/catalogue/data/<family>.toml), pairs written from the rule's documentation
(tools/catalogue/docs/<CODE>.md) and the target facts, not copied from the codemod's output.
The goldens (tests/golden.py) are regenerated from the codemods themselves, so only pairs like
these catch a codemod that is wrong from the start (they found TPN006 leaving every
``os.environ["NCCL_X"] = ...`` in place, and TPA001's accelerator port dropping float16).

A pair: ``rule``, ``target``, ``name`` (what it shows), ``before``, ``after`` (absent: the code
must be left alone), optional ``why`` (the fact the expectation rests on) and ``file`` (the
name it is scanned under; a ``.py`` takes the goldens' entry, golden.migrate_file, anything
else the text codemods'). ``<accelerator>`` in an ``after`` stands for the accelerator
target's portable device, the documented idiom (TARGETS.md): the current accelerator, else
the CPU.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from golden import migrate_file
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods.text import migrate_text
from torchport.tools.scanner import ScanOptions, scan

ORACLES = Path(__file__).parent / "fixtures" / "oracles"
CATALOGUE = Path(__file__).parents[1] / "tools" / "catalogue" / "data"
ACCELERATOR = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
PLACEHOLDERS = {"<accelerator>": ACCELERATOR}


@dataclass(frozen=True)
class Pair:
    family: str
    rule: str
    target: str
    name: str
    before: str
    after: str | None = None
    why: str = ""
    file: str = "prog.py"

    @property
    def id(self) -> str:
        return f"{self.family}-{self.rule}-{self.target}-{self.name}"

    @property
    def expected(self) -> str:
        if self.after is None:
            return self.before
        text = self.after
        for placeholder, code in PLACEHOLDERS.items():
            text = text.replace(placeholder, code)
        return text


def load_pairs() -> list[Pair]:
    pairs = []
    for path in sorted(ORACLES.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        pairs += [Pair(family=path.stem, **entry) for entry in data["pair"]]
    return pairs


PAIRS = load_pairs()


def migrate(path: Path, target: str) -> str:
    """The goldens' entry for Python; for other files the same with the text codemods."""
    if path.suffix == ".py":
        return migrate_file(path, target)
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_text(path.read_text(encoding="utf-8"), findings, target, path.name).source


def diff(expected: str, got: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True), got.splitlines(keepends=True), "oracle", "codemod"
    )
    return "".join(lines)


@pytest.mark.parametrize("pair", [pytest.param(p, id=p.id) for p in PAIRS])
def test_the_codemod_gives_the_oracles_output(pair: Pair, tmp_path: Path) -> None:
    """Byte for byte; then a second migration of the output changes nothing."""
    path = tmp_path / pair.file
    path.write_text(pair.before, encoding="utf-8")
    got = migrate(path, pair.target)
    if got != pair.expected:
        pytest.fail(f"{pair.id} ({pair.why})\n" + diff(pair.expected, got), pytrace=False)
    path.write_text(got, encoding="utf-8")
    assert migrate(path, pair.target) == got, f"{pair.id}: a second run changed it"


def test_every_rule_family_has_oracles_for_tpu_and_accelerator_and_a_left_alone_case() -> None:
    families = sorted(p.stem for p in CATALOGUE.glob("*.toml"))
    assert sorted({p.family for p in PAIRS}) == families
    for family in families:
        mine = [p for p in PAIRS if p.family == family]
        assert {"tpu", "accelerator"} <= {p.target for p in mine}, family
        assert any(p.after is None for p in mine), f"{family}: no pair where the rule stays out"


def test_the_pairs_are_well_formed() -> None:
    """Unique ids, known targets, each rule in its family's catalogue file, a left-alone pair
    written as such (no `after`)."""
    ids = [p.id for p in PAIRS]
    assert sorted({i for i in ids if ids.count(i) > 1}) == []
    codes = {
        path.stem: {rule["code"] for rule in tomllib.loads(path.read_text("utf-8"))["rule"]}
        for path in CATALOGUE.glob("*.toml")
    }
    for pair in PAIRS:
        assert pair.target in TARGETS, pair.id
        assert pair.rule in codes[pair.family], pair.id
        assert pair.before != pair.after, f"{pair.id}: leave `after` out for a left-alone pair"
