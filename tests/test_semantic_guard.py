"""The semantic guard: a fix whose edit would introduce a static finding is refused.

Each program in tests/fixtures/guard is a small realistic reproduction of a pattern from
issue 14 that the codemods got wrong; WRONG pins the line the unguarded codemods produced,
which must not come back. <name>.<target>.py is the reviewed, guarded output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchport.tools.catalogue import TARGETS
from torchport.tools.codemods import engine, migrate_python
from torchport.tools.codemods.guard import (
    blocking,
    introduced,
    original_lines,
    problems,
    removed_imported_names,
)
from torchport.tools.scanner import ScanOptions, scan

GUARD = Path(__file__).parent / "fixtures" / "guard"

# program -> (the wrong line the codemods wrote without the guard, the finding that refuses it)
WRONG = {
    "unbound_device": ("model.to(device)", "UndefinedLocal"),
    "forwarded_kwargs": ('**kwargs, map_location="cpu"', "KeywordBesideForwardedKwargs"),
}
CASES = [(name, target) for name in WRONG for target in TARGETS]


def _auto_findings(path: Path, target: str):
    found = scan(path, ScanOptions(target=target)).findings
    return [f for f in found if f.fix[target]["kind"] == "auto"]


@pytest.mark.parametrize(("name", "target"), CASES)
def test_the_guard_refuses_the_edit_that_broke_the_program(name: str, target: str) -> None:
    path = GUARD / f"{name}.py"
    source = path.read_text(encoding="utf-8")
    findings = _auto_findings(path, target)
    wrong, kind = WRONG[name]
    unguarded, _ = engine._migrate_once(source, findings, target, path.name, None)
    assert wrong in unguarded.source  # the pattern is real: one pass without the guard
    result = migrate_python(source, findings, target, path.name)
    assert wrong not in result.source
    assert result.source == (GUARD / f"{name}.{target}.py").read_text(encoding="utf-8")
    assert introduced(source, result.source) == []
    refusals = [why for _, why in result.unapplied if "semantic guard" in why]
    assert refusals and all(kind in why for why in refusals)


@pytest.mark.parametrize("target", TARGETS)
def test_event_timing_in_a_closure_needs_no_refusal_now(target: str) -> None:
    """It was the guard's third case: `starter.record()` in a closure became a new local
    `starter = time.perf_counter()`, the outer variable never updated (pyflakes: unused).
    The events codemod now sees that only the closure uses the events: their constructor
    lines go and the closure's timestamps are its own locals, so nothing is refused."""
    path = GUARD / "closure_timing.py"
    source = path.read_text(encoding="utf-8")
    findings = _auto_findings(path, target)
    unguarded, _ = engine._migrate_once(source, findings, target, path.name, None)
    code = unguarded.source
    assert code.count("starter = time.perf_counter()") == 1 and "nonlocal" not in code
    assert code.index("def run_once") < code.index("starter = time.perf_counter()")
    result = migrate_python(source, findings, target, path.name)
    assert result.source == unguarded.source
    assert result.source == (GUARD / f"closure_timing.{target}.py").read_text(encoding="utf-8")
    assert introduced(source, result.source) == []
    assert not [why for _, why in result.unapplied if "semantic guard" in why]


def test_findings_compare_by_kind_and_name_not_line() -> None:
    before = "import os\nprint(undefined_a)\n"
    moved = "import os\n\n\n\nprint(undefined_a)\n"
    assert introduced(before, moved) == []
    added = introduced(before, moved + "print(undefined_b)\n")
    assert [(p.kind, p.name) for p in added] == [("UndefinedName", "undefined_b")]


def test_a_keyword_twice_in_one_call_is_a_finding() -> None:
    found = problems("import torch\ntorch.load('x', map_location=None, map_location='cpu')\n")
    assert [(p.kind, p.name) for p in found] == [("DuplicateKeyword", "map_location")]


def test_a_keyword_beside_kwargs_the_function_did_not_receive_is_fine() -> None:
    source = "def f(path):\n    opts = {}\n    return load(path, **opts, map_location='cpu')\n"
    assert [p.kind for p in problems(source)] == ["UndefinedName"]  # `load` only


def test_a_line_of_the_migrated_file_maps_to_the_original_lines() -> None:
    before = "a = 1\nb = 2\nc = 3\n"
    after = "import x\na = 1\nb = x.two()\nc = 3\n"
    assert list(original_lines(before, after, 4)) == [3]
    assert list(original_lines(before, after, 3)) == [2]
    assert list(original_lines(before, after, 1)) == []


def test_an_import_the_migration_left_unused_is_removed_not_blamed() -> None:
    path = GUARD.parent / "golden" / "TPD015.py"
    source = path.read_text(encoding="utf-8")
    result = migrate_python(source, _auto_findings(path, "tpu"), "tpu", path.name)
    assert "torch.cuda" not in result.source
    assert "import torch\n" not in result.source  # nothing uses torch any more
    assert not [why for _, why in result.unapplied if "semantic guard" in why]


def test_the_report_lists_each_refusal(tmp_path: Path) -> None:
    import json
    import shutil

    from torchport.tools.migrate import MigrateOptions, migrate

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(GUARD / "forwarded_kwargs.py", src / "checkpoint.py")
    result = migrate(src, MigrateOptions(target="tpu", out=tmp_path / "out"))
    report = result.report_dir
    data = json.loads((report / "changes.json").read_text())
    assert data["summary"]["refused_by_guard"] == 1
    [left] = data["left_for_humans"]
    assert left["reason"].startswith("refused by the semantic guard") and left["line"] == 9
    assert "KeywordBesideForwardedKwargs" in (report / "manual.md").read_text()
    assert (
        "1 of those fixes were refused by the semantic guard" in (report / "summary.md").read_text()
    )
    assert (tmp_path / "out" / "checkpoint.py").read_text() == (src / "checkpoint.py").read_text()


def test_an_unused_assignment_of_a_name_the_original_never_binds_does_not_block() -> None:
    """`model = model.to(d)` twice in a function that never binds `model`: the rewrite
    drops the repeat, and pyflakes' "never used" says nothing about such a name."""
    before = "def f():\n    model = model.to('cuda')\n    model = model.to('cuda')\n"
    after = "def f():\n    model = model.to('tpu')\n"
    assert [p.kind for p in introduced(before, after)] == ["UnusedVariable"]
    assert blocking(before, after) == []


def test_a_dead_assignment_the_migration_did_not_touch_does_not_block() -> None:
    """`rank` lost its only reader when the map_location dict became "tpu": dead, not wrong.
    The same finding on a line the migration rewrote blocks."""
    before = (
        "def f(load):\n    rank = 0\n    return load(map_location={'cuda:1': f'cuda:{rank}'})\n"
    )
    after = "def f(load):\n    rank = 0\n    return load(map_location='tpu')\n"
    assert [p.kind for p in introduced(before, after)] == ["UnusedVariable"]
    assert blocking(before, after) == []
    rebound = after.replace("rank = 0", "rank = 1")
    assert [p.kind for p in blocking(before, rebound)] == ["UnusedVariable"]


# --- names other files import (the LLM lane's replacements) ------------------------------

KERNEL_MODULE = """\
import torch
from torch.utils.cpp_extension import load

_ext = load(name="causal_softmax", sources=["k.cu"])


class CausalSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, scale):
        return _ext.forward(scores, scale)


def causal_softmax(scores, scale):
    return CausalSoftmax.apply(scores, scale)
"""
# the embedded model's answer on masked-softmax-extension: the Function in torch, the
# wrapper the program calls gone
WITHOUT_WRAPPER = """\
import torch


class CausalSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, scale):
        return torch.softmax(scores * scale, dim=-1)
"""


@pytest.mark.parametrize(
    "importer",
    [
        "from tinylm.causal_softmax import causal_softmax\n",
        "from .causal_softmax import causal_softmax as softmax\n",
        "import tinylm.causal_softmax as cs\ny = cs.causal_softmax(x, 1.0)\n",
        "import tinylm.causal_softmax\ny = tinylm.causal_softmax.causal_softmax(x, 1.0)\n",
        "from tinylm import causal_softmax\ny = causal_softmax.causal_softmax(x, 1.0)\n",
    ],
)
def test_a_replacement_that_drops_a_name_another_file_imports_is_named(importer: str) -> None:
    others = {"tinylm/model.py": importer}
    found = removed_imported_names(
        "tinylm/causal_softmax.py", KERNEL_MODULE, WITHOUT_WRAPPER, others
    )
    assert found == [
        "tinylm/causal_softmax.py: `causal_softmax` is gone, and tinylm/model.py imports it"
    ]


@pytest.mark.parametrize(
    "importer",
    [
        "from tinylm.causal_softmax import CausalSoftmax\n",  # a name that is still there
        "from tinylm.other import causal_softmax\n",  # another module's name
        "import tinylm.causal_softmax\n",  # the module, not the name
        "causal_softmax = lambda s, k: s\n",  # a name of its own
    ],
)
def test_names_still_defined_or_taken_from_elsewhere_are_not(importer: str) -> None:
    others = {"tinylm/model.py": importer}
    rel = "tinylm/causal_softmax.py"
    assert removed_imported_names(rel, KERNEL_MODULE, WITHOUT_WRAPPER, others) == []
    kept = WITHOUT_WRAPPER + "\n\ndef causal_softmax(scores, scale):\n    return scores\n"
    importer_of_it = {"train.py": "from tinylm.causal_softmax import causal_softmax\n"}
    assert removed_imported_names(rel, KERNEL_MODULE, kept, importer_of_it) == []


def test_the_rewriter_refuses_such_an_edit_reading_the_other_files_of_the_tree(tmp_path):
    """The guard of llm_repair reads the materialised tree for the importers, with the
    round's other updated files over it."""
    from torchport.agents.rewriter import dropped_names

    source = tmp_path / "src"
    (source / "tinylm").mkdir(parents=True)
    (source / "tinylm" / "causal_softmax.py").write_text(KERNEL_MODULE)
    (source / "tinylm" / "__init__.py").write_text("from .causal_softmax import causal_softmax\n")
    (source / "train.py").write_text("from tinylm import causal_softmax\n")
    updated = {"tinylm/causal_softmax.py": WITHOUT_WRAPPER}
    assert dropped_names(source, {}, updated, source) == (
        "tinylm/causal_softmax.py: `causal_softmax` is gone, and tinylm/__init__.py imports it"
    )
    # the same round also took the re-export out of __init__: nothing imports it any more
    both = {**updated, "tinylm/__init__.py": ""}
    assert dropped_names(source, {}, both, source) == ""


HONEST = "import torch\nloss = torch.zeros(1)\nloss.backward()\n"
REACHING = {
    "from torchport.sandbox import session\n": "imports torchport's own package",
    "import torchport.sandbox.channel\n": "imports torchport's own package",
    "import os\nrun = os.environ['TORCHPORT_RUN']\n": "TORCHPORT_RUN",
    "import importlib\nimportlib.import_module('torchport.sandbox')\n": "'torchport.sandbox'",
    "import os\nos._exit(0)\n": "os._exit",
}


@pytest.mark.parametrize("added", list(REACHING))
def test_an_edit_that_reaches_torchports_machinery_is_refused(tmp_path, added: str) -> None:
    """What an LLM edit may not do to the program it ports: reach what the verdict rests on
    (torchport's package, its variables, an exit past the launcher's report). The rewriter's
    own check of an edit's files, on a file of the tree."""
    from torchport.agents.rewriter import introduced_by_edit

    (tmp_path / "train.py").write_text(HONEST)
    found = introduced_by_edit(tmp_path, {}, {"train.py": HONEST + added})
    assert found.startswith("train.py:") and REACHING[added] in found
    # the same code already in the original is the program's own, not the edit's
    (tmp_path / "train.py").write_text(HONEST + added)
    assert introduced_by_edit(tmp_path, {}, {"train.py": HONEST + added + "x = 1\n"}) == ""
