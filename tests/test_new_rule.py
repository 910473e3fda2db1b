"""scripts/new_rule.py on a copy of the tree: the rule it writes loads, is documented as the
catalogue requires, and its fixer stub passes the catalogue/codemods check when the copied
package is imported for real; it refuses existing and malformed codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from torchport.tools.catalogue import TARGETS, load_catalogue_from

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "new_rule.py"
NO_CACHE = shutil.ignore_patterns("__pycache__")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``<tmp>/torchport``: a copy of tools/ (importable as torchport.tools from <tmp>) and
    of the golden inputs, laid out as the script expects under its root."""
    root = tmp_path / "torchport"
    shutil.copytree(REPO / "tools", root / "tools", ignore=NO_CACHE)
    shutil.copytree(REPO / "tests/fixtures/golden", root / "tests/fixtures/golden")
    (root / "__init__.py").write_text("", encoding="utf-8")
    return root


def new_rule(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )


def in_copy(root: Path, code: str) -> str:
    """Run ``code`` with the copied package shadowing the real one; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(root.parent)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_an_auto_rule_loads_with_its_doc_fixer_and_golden_input(tree):
    proc = new_rule(
        tree, "TPD900", "device", "`torch.cuda.frobnicate()` calls",
        "--targets", "tpu,neuron", "--fix", "auto", "--ref", "torch.cuda.frobnicate",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rule = load_catalogue_from(tree / "tools" / "catalogue").by_code["TPD900"]
    assert rule.name == "torch-cuda-frobnicate-calls" and rule.category == "device"
    kinds = {t: rule.fixes[t].kind.value for t in TARGETS}
    assert kinds == {"tpu": "auto", "neuron": "auto", "xla": "manual", "accelerator": "manual"}
    assert rule.doc.startswith("# TPD900 torch-cuda-frobnicate-calls")
    for target, kind in kinds.items():
        assert f"**{target}** ({kind})" in rule.doc
    golden = tree / "tests/fixtures/golden/TPD900.py"
    assert golden.is_file()
    # the real import path: registering every codemod, then checking them against the copy's
    # catalogue, which now says auto for TPD900 on tpu and neuron only
    out = in_copy(
        tree,
        "import torchport.tools.codemods as c\n"
        "from pathlib import Path\n"
        "from torchport.tools.scanner import scan\n"
        f"assert c.__file__.startswith({str(tree)!r}), c.__file__\n"
        "print(sorted(t for code, t in c.FIXERS if code == 'TPD900'))\n"
        f"print([f.rule for f in scan(Path({str(golden)!r})).findings])\n"
        "from torchport.tools.catalogue import applicability as a\n"
        "print(a.declared()['TPD900']['tpu'].applicability)\n",
    )
    # a new fix is never taken for safe before its author says what it may change
    assert out.splitlines() == ["['neuron', 'tpu']", "['TPD900']", "behaviour"]


def test_a_manual_rule_has_no_fixer_and_no_golden_input(tree):
    before = {p.name for p in (tree / "tools/codemods").iterdir()}
    sources = {p: p.read_text() for p in (tree / "tools/codemods").glob("*.py")}
    assert new_rule(tree, "TPM900", "memory", "A memory thing").returncode == 0
    assert "TPM900" in load_catalogue_from(tree / "tools" / "catalogue").by_code
    assert {p.name for p in (tree / "tools/codemods").iterdir()} == before
    assert all(p.read_text() == text for p, text in sources.items())
    assert not (tree / "tests/fixtures/golden/TPM900.py").exists()


@pytest.mark.parametrize(
    ("code", "why"),
    [("TPD001", "exists already"), ("TPD1000", "not a rule code"), ("tpd900", "not a rule code")],
)
def test_existing_and_malformed_codes_are_refused_and_nothing_is_written(tree, code, why):
    before = snapshot(tree)
    proc = new_rule(tree, code, "device", "Something", "--fix", "auto")
    assert proc.returncode == 1 and why in proc.stderr
    assert snapshot(tree) == before


def test_a_fixer_module_that_does_not_exist_is_refused_and_nothing_is_written(tree):
    before = snapshot(tree)
    proc = new_rule(tree, "TPD900", "device", "Something", "--fix", "auto", "--module", "nope")
    assert proc.returncode == 1 and "no codemods module nope.py" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and snapshot(tree) == before
