"""Hand-written before/after oracles for the codemods, in the style of libcst's CodemodTest:
each pair states its input and the exact expected output inline, written from the rule's
documentation (tools/catalogue/docs/<CODE>.md) and the target facts, not copied from the
codemod's output. The goldens (tests/golden.py) are regenerated from the codemods
themselves, so only a pair like these can catch a codemod that is wrong from the start.

The pairs run through the goldens' own entry (golden.migrate_file: scan, then
migrate_python with the auto findings of the target).
"""

from __future__ import annotations

import difflib
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from golden import migrate_file
from torchport.tools.codemods.text import migrate_text
from torchport.tools.scanner import ScanOptions, scan

# The accelerator target's portable device, as the pairs spell it: `<accelerator>` in an
# `after` text stands for it (the spelled-out expression does not fit a line). It is the
# documented idiom (TARGETS.md, accelerator): the current accelerator, else the CPU.
ACCELERATOR = 'torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")'
PLACEHOLDERS = {"<accelerator>": ACCELERATOR}


def expand(text: str) -> str:
    for placeholder, code in PLACEHOLDERS.items():
        text = text.replace(placeholder, code)
    return text


@dataclass(frozen=True)
class Pair:
    """One oracle: `before` migrated for `target` must read `after`, byte for byte.

    `name` says what the pair shows (it becomes the test id with the rule and target);
    `after=None` means the code must be left alone (the rule must not fire or not touch it).
    `file` is the name the source is scanned under: a `.py` file takes the goldens' entry,
    any other (requirements.txt, a shell script) the text codemods'.
    """

    rule: str
    target: str
    name: str
    before: str
    after: str | None = None
    file: str = "prog.py"

    @property
    def id(self) -> str:
        return f"{self.rule}-{self.target}-{self.name}"


def params(pairs: list[Pair]) -> list:
    """The pairs as pytest params, each with its readable id."""
    ids = [p.id for p in pairs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"two oracle pairs share an id: {duplicates}"
    return [pytest.param(p, id=p.id) for p in pairs]


def assert_pair(pair: Pair, folder: Path) -> None:
    """Migrate the dedented `before` as a file of its own and compare with `after`; then
    migrate the result again, which must change nothing (a port is a fixed point)."""
    before = textwrap.dedent(pair.before).lstrip("\n")
    after = before if pair.after is None else expand(textwrap.dedent(pair.after).lstrip("\n"))
    path = folder / pair.file
    path.write_text(before, encoding="utf-8")
    got = _migrate(path, pair.target)
    assert got == after, f"{pair.id}: the codemod's output differs from the oracle\n" + _diff(
        after, got
    )
    path.write_text(got, encoding="utf-8")
    assert _migrate(path, pair.target) == got, f"{pair.id}: a second run changed it"


def _migrate(path: Path, target: str) -> str:
    if path.suffix == ".py":
        return migrate_file(path, target)
    findings = [
        f
        for f in scan(path, ScanOptions(target=target)).findings
        if f.fix[target]["kind"] == "auto"
    ]
    return migrate_text(path.read_text(encoding="utf-8"), findings, target, path.name).source


def _diff(expected: str, got: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True), got.splitlines(keepends=True), "oracle", "codemod"
    )
    return "".join(lines)
