"""replace_lines: whole statements of one block, re-indented, everything else byte for byte."""

from __future__ import annotations

import pytest
from torchport.tools.ast_edits import EditRefused, replace_lines

SOURCE = """\
import torch  # the framework

# a decorated step
@torch.no_grad()
def step(x, y):
    # keep this comment
    torch.cuda.synchronize()
    z = torch.matmul(
        x,
        y,
    )  # product
    if z.is_cuda:
        z = z.cpu()
        # end of branch
    return z


print(step(1, 2))
"""


def lines_of(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_replaces_one_statement_inside_a_function_and_indents_it():
    result = replace_lines(SOURCE, 7, 7, "torch.accelerator.synchronize()\nstarted = True")
    expected = SOURCE.replace(
        "    torch.cuda.synchronize()\n",
        "    torch.accelerator.synchronize()\n    started = True\n",
    )
    assert result.source == expected
    assert (result.start_line, result.end_line) == (7, 8)


def test_outside_the_span_stays_byte_for_byte():
    result = replace_lines(SOURCE, 8, 11, "z = x @ y")
    old, new = lines_of(SOURCE), lines_of(result.source)
    assert new[:7] == old[:7]  # includes the comment right above the span
    assert new[7] == "    z = x @ y\n"
    assert new[8:] == old[11:]


def test_replaces_a_whole_decorated_function_keeping_the_comment_above():
    new_code = "def step(x, y):\n    return x @ y\n"
    result = replace_lines(SOURCE, 4, 15, new_code)
    assert result.source == (
        "import torch  # the framework\n\n# a decorated step\n"
        "def step(x, y):\n    return x @ y\n\n\nprint(step(1, 2))\n"
    )
    assert (result.start_line, result.end_line) == (4, 5)


def test_indented_new_code_is_dedented_then_fitted_to_the_block():
    result = replace_lines(SOURCE, 12, 14, "        if z.is_cuda:\n            z = z.to('cpu')\n")
    assert "    if z.is_cuda:\n        z = z.to('cpu')\n    return z\n" in result.source


def test_two_space_indentation_of_the_file_is_kept():
    source = "def f(a):\n  if a:\n    a = 1\n  return a\n"
    result = replace_lines(source, 2, 3, "if a:\n    a = 2\n    a += 1")
    assert result.source == "def f(a):\n  if a:\n    a = 2\n    a += 1\n  return a\n"


def test_refuses_half_a_statement_and_names_the_valid_span():
    with pytest.raises(EditRefused, match="lines 8-11") as info:
        replace_lines(SOURCE, 8, 9, "z = x")
    assert "not whole statements" in str(info.value)


def test_refuses_a_span_mixing_a_def_line_and_its_body_pointing_at_the_whole_def():
    with pytest.raises(EditRefused, match="lines 4-15"):
        replace_lines(SOURCE, 5, 7, "pass")


def test_refuses_a_span_of_only_comments():
    with pytest.raises(EditRefused, match="no statement"):
        replace_lines(SOURCE, 6, 6, "pass")


def test_refuses_new_code_that_does_not_parse():
    with pytest.raises(EditRefused, match="does not parse"):
        replace_lines(SOURCE, 7, 7, "torch.accelerator.synchronize(")


def test_refuses_new_code_that_parses_but_does_not_compile_in_place():
    with pytest.raises(EditRefused, match="would not compile"):
        replace_lines(SOURCE, 18, 18, "return 1")  # return at module level


def test_empty_new_code_removes_statements_and_keeps_a_block_valid():
    removed = replace_lines(SOURCE, 7, 7, "")
    assert "synchronize" not in removed.source
    assert "    # keep this comment\n    z = torch.matmul(\n" in removed.source
    emptied = replace_lines(SOURCE, 13, 13, "")
    assert "    if z.is_cuda:\n        pass\n        # end of branch\n" in emptied.source
    compile(emptied.source, "<test>", "exec")


def test_bad_line_numbers_are_refused():
    with pytest.raises(EditRefused, match="bad line span"):
        replace_lines(SOURCE, 9, 8, "pass")


def test_remove_unused_imports_drops_only_unused_names_of_the_given_modules():
    from torchport.tools.ast_edits import remove_unused_imports

    source = (
        "import torch\n"
        "from apex.normalization import FusedLayerNorm\n"
        "from apex.optimizers import FusedAdam  # still used\n"
        "import flash_attn as fa\n"
        "import numpy as np\n"
        "\n"
        "norm = torch.nn.LayerNorm(3)\n"
        "opt = FusedAdam([])\n"
    )
    pruned = remove_unused_imports(source, ("apex", "flash_attn"))
    assert "FusedLayerNorm" not in pruned and "flash_attn" not in pruned
    assert "from apex.optimizers import FusedAdam  # still used\n" in pruned
    assert "import numpy as np\n" in pruned  # unused, but not a module we were asked about
    assert remove_unused_imports(pruned, ("apex", "flash_attn")) == pruned
    assert remove_unused_imports(source, ("triton",)) == source
