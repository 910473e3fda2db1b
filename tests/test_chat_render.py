"""Chat's tables, as both renderers draw them: a column empty in every row is left out
(the "undone" column of a list where nothing is undone), a table of names and values
has no header line, and a column with one value in it stays."""

from __future__ import annotations

import io

from rich.console import Console
from torchport.agents.chat.render import PlainRenderer, RichRenderer

CHANGES = {
    "kind": "table",
    "title": "changes",
    "columns": ["#", "where", "by", ""],
    "rows": [["1", "train.py:15", "codemod TPD001", ""], ["2", "train.py:17", "llm", " "]],
}


def plain(event: dict) -> list[str]:
    out = io.StringIO()
    PlainRenderer(out).show(event)
    return out.getvalue().splitlines()


def rich(event: dict) -> str:
    renderer = RichRenderer()
    renderer.console = Console(file=io.StringIO(), width=100, color_system=None)
    renderer.show(event)
    return renderer.console.file.getvalue()


def test_a_column_empty_in_every_row_is_not_drawn():
    assert plain(CHANGES) == [
        "changes",
        "#  where        by",
        "1  train.py:15  codemod TPD001",
        "2  train.py:17  llm",
    ]
    drawn = rich(CHANGES)
    header = next(line for line in drawn.splitlines() if "where" in line)
    assert header.count("┃") == 4  # three columns: four borders
    assert "│ 1 │ train.py:15 │ codemod TPD001 │" in drawn


def test_a_column_with_one_value_stays():
    undone = {**CHANGES, "rows": [CHANGES["rows"][0], ["2", "train.py:17", "llm", "undone"]]}
    assert plain(undone)[1].split() == ["#", "where", "by"]
    assert plain(undone)[3].endswith("llm             undone")
    header = next(line for line in rich(undone).splitlines() if "where" in line)
    assert header.count("┃") == 5


def test_a_table_of_names_and_values_has_no_empty_header():
    report = {"kind": "table", "title": "session", "columns": ["", ""], "rows": [["a", "1"]]}
    assert plain(report) == ["session", "a  1"]
    assert "┃" not in rich(report) and "│ a │ 1 │" in rich(report)


def test_a_table_without_rows_keeps_its_columns():
    empty = {"kind": "table", "title": "t", "columns": ["rule", "where"], "rows": []}
    assert plain(empty) == ["t", "rule  where"]
