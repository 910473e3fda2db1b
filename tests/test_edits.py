"""The AST edit primitives: each edit happens exactly where asked, or is refused with a reason."""

from __future__ import annotations

import pytest
from torchport.tools.ast_edits import (
    EditRefused,
    insert_import,
    replace_node,
)

SOURCE = """\
import torch  # the framework

def step(x, y):
    torch.cuda.synchronize()
    z = x * y  # product
    out = torch.compile(model, mode="max-autotune", fullgraph=True)
    return z
"""


def test_replace_node_changes_only_the_span():
    result = replace_node(SOURCE, 5, 9, 5, 14, "x @ y")
    assert result.source == SOURCE.replace("z = x * y", "z = x @ y")


def test_replace_node_adds_parentheses_when_precedence_needs_them():
    result = replace_node(SOURCE, 5, 9, 5, 10, "a + b")
    assert "z = (a + b) * y  # product" in result.source


def test_replace_node_refuses_a_span_that_is_not_a_node():
    with pytest.raises(EditRefused, match="no syntax node spans exactly"):
        replace_node(SOURCE, 5, 9, 5, 12, "q")


def test_replace_node_refuses_code_that_does_not_parse():
    with pytest.raises(EditRefused, match="not an expression"):
        replace_node(SOURCE, 5, 9, 5, 14, "x *")


def test_replace_node_refuses_code_that_does_not_compile():
    with pytest.raises(EditRefused, match="would not compile"):
        replace_node(SOURCE, 7, 5, 7, 13, "return await z")  # 'await' outside async


def test_insert_import_once_and_only_imports():
    result = insert_import(SOURCE, "time")  # the standard library's group, above torch's
    assert result.source == "import time\n\n" + SOURCE
    assert insert_import(result.source, "time").source == result.source
    with pytest.raises(EditRefused, match="not an importable name"):
        insert_import(SOURCE, "os; import shutil")


def test_edits_refuse_files_that_do_not_parse():
    with pytest.raises(EditRefused, match="does not parse"):
        insert_import("def f(:\n", "time")
    with pytest.raises(EditRefused, match="does not parse"):
        replace_node("def f(:\n", 1, 1, 1, 4, "g")


# yolov5's utils/loggers: an optional import guarded by try/except before the torch imports.
# libcst's AddImportsVisitor, which the LLM lane used, reads only the first run of imports:
# it put a second `import torch` above the try block and a stdlib import after torch's.
GUARDED = """\
\"\"\"Loggers.\"\"\"

import os

try:
    import comet_ml
except ImportError:
    comet_ml = None

import torch
from torch.utils.tensorboard import SummaryWriter


def log(x):
    return torch.cuda.is_available()
"""


def test_insert_import_after_a_guarded_import_reuses_and_groups_like_a_person():
    # torch is imported already, after the try block: nothing to add
    assert insert_import(GUARDED, "torch").source == GUARDED
    # a stdlib import joins `import os`, above the try block
    with_time = insert_import(GUARDED, "time")
    assert with_time.source == GUARDED.replace("import os\n", "import os\nimport time\n", 1)
    assert (with_time.start_line, with_time.end_line) == (4, 4)
    # a torch-family import joins torch's group, after the try block
    xla = insert_import(GUARDED, "torch_xla.core.xla_model", asname="xm")
    assert xla.source == GUARDED.replace(
        "SummaryWriter\n", "SummaryWriter\nimport torch_xla.core.xla_model as xm\n", 1
    )
    # a from-import too, and a second insertion of it changes nothing
    sync = insert_import(GUARDED, "torch_xla", name="sync")
    assert "SummaryWriter\nfrom torch_xla import sync\n" in sync.source
    assert sync.source.count("\n") == GUARDED.count("\n") + 1
    assert insert_import(sync.source, "torch_xla", name="sync").source == sync.source
