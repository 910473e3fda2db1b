"""PyTorch 0.3's ``x.cuda(async=True)``: a SyntaxError on Python 3.7+, renamed non_blocking=.

The file could not be parsed, so the scan skipped it, no codemod touched it, and the
verdict read "the original fails here too: SyntaxError". The rename is the one PyTorch 0.4
made (same meaning); the port gets it, the reference run uses a copy of the original with
it, and both the migration's edits and the verdict list every renamed line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from torchport.agents.verifier import RunLimits, verify_tree
from torchport.tools.legacy_keyword import repaired
from torchport.tools.migrate import MigrateOptions, migrate

_TRAIN = """import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(3):
    x, y = x.cuda(), y.cuda(async=True)
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_only_keyword_arguments_of_calls_are_renamed_and_only_when_the_file_then_parses():
    fixed = repaired("a = f(x, async=True)(async=1)\nb = t[0](async=False)\n")
    assert fixed is not None
    assert fixed.text == (
        "a = f(x, non_blocking=True)(non_blocking=1)\nb = t[0](non_blocking=False)\n"
    )
    assert [(r.line, r.col) for r in fixed.renames] == [
        (1, 9),
        (1, 21),
        (2, 9),
    ]  # columns of the original
    assert repaired("y = x.cuda(non_blocking=True)\n") is None  # parses: nothing to do
    # a definition's parameter: its callers' keyword would not follow, so no rename
    assert repaired("def f(x, async=False):\n    return x\n") is None
    # another syntax error besides: the file stays as written
    assert repaired("y = x.cuda(async=True)\nprint 'py2'\n") is None


def test_the_port_is_valid_python_with_the_rename_listed(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text(_TRAIN)
    result = migrate(repo, MigrateOptions(target="tpu", dry_run=True))
    assert not result.scan.skipped  # scanned, not skipped for its syntax error
    (change,) = result.changes
    ast.parse(change.after)
    assert 'y.to("tpu", non_blocking=True)' in change.after and "async" not in change.after
    renamed = [e for e in result.edits if e.rule == "async-keyword"]
    assert [(e.line, e.after.strip()) for e in renamed] == [
        (7, "x, y = x.cuda(), y.cuda(non_blocking=True)")
    ]
    assert "Python 3.7" in renamed[0].reason


@pytest.mark.slow
def test_the_original_runs_with_the_rename_and_the_verdict_says_so(tmp_path: Path):
    original, port = tmp_path / "original", tmp_path / "port"
    original.mkdir()
    (original / "train.py").write_text(_TRAIN)
    result = migrate(original, MigrateOptions(target="tpu", out=port))
    assert result.output is not None
    budget = RunLimits(steps=3, timeout_s=120, memory_mb=2048)
    v, reference = verify_tree(original, port, ["python", "train.py"], "tpu", budget, None)
    assert reference["status"] == "ok", reference.get("error")
    assert v.verdict == "verified", v.reason
    assert "the original ran with `async=` renamed `non_blocking=` (train.py:7)" in v.reason
    assert "async=True" in (original / "train.py").read_text()  # the original stays as written


def test_the_dependencies_of_a_program_with_async_keywords_are_read(tmp_path):
    """The entry parses only renamed; read unrenamed, nothing it imports was seen, so
    torchport's own matplotlib was hidden from the runs of a program that imports it."""
    from torchport.tools.depresolve import resolve

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("from .log import *\n")
    (tmp_path / "lib" / "log.py").write_text("import matplotlib\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom lib import *\nx = torch.zeros(1).cuda(async=True)\n"
    )
    names = resolve(tmp_path, ["python", "train.py"]).import_names
    assert names.get("matplotlib") == "matplotlib", names
