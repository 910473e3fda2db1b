"""The AST edit primitives: each edit happens exactly where asked, or is refused with a reason."""

from __future__ import annotations

import pytest
from torchport.tools.ast_edits import (
    EditRefused,
    insert_import,
    remove_statement,
    replace_node,
    rewrite_attribute,
    rewrite_call_arguments,
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


def test_rewrite_attribute_renames_the_whole_chain():
    result = rewrite_attribute(SOURCE, 4, 5, "torch.accelerator.synchronize")
    assert "    torch.accelerator.synchronize()\n" in result.source
    assert result.source.replace("accelerator", "cuda") == SOURCE
    with pytest.raises(EditRefused, match="not a dotted name"):
        rewrite_attribute(SOURCE, 4, 5, "torch.accelerator.sync()")
    with pytest.raises(EditRefused, match="no attribute access"):
        rewrite_attribute(SOURCE, 5, 5, "q.r")


def test_rewrite_call_arguments_sets_and_removes_keywords():
    result = rewrite_call_arguments(
        SOURCE, 6, 11, remove_keywords=("mode",), set_keywords={"backend": '"tpu"'}
    )
    assert '    out = torch.compile(model, fullgraph=True, backend="tpu")\n' in result.source
    with pytest.raises(EditRefused, match="no keyword"):
        rewrite_call_arguments(SOURCE, 6, 11, remove_keywords=("dynamic",))
    with pytest.raises(EditRefused, match="no call starts"):
        rewrite_call_arguments(SOURCE, 5, 5)


def test_remove_statement_keeps_blocks_valid():
    result = remove_statement(SOURCE, 4)
    assert "synchronize" not in result.source
    assert result.source.count("\n") == SOURCE.count("\n") - 1
    only = "def f():\n    torch.cuda.synchronize()\n"
    assert remove_statement(only, 2).source == "def f():\n    pass\n"
    with pytest.raises(EditRefused, match="no simple statement"):
        remove_statement(SOURCE, 3)


def test_insert_import_once_and_only_imports():
    result = insert_import(SOURCE, "time")
    assert result.source.replace("import time\n", "", 1) == SOURCE
    assert insert_import(result.source, "time").source == result.source
    with pytest.raises(EditRefused, match="not an importable name"):
        insert_import(SOURCE, "os; import shutil")


def test_edits_refuse_files_that_do_not_parse():
    with pytest.raises(EditRefused, match="does not parse"):
        remove_statement("def f(:\n", 1)
