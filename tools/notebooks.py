"""Jupyter notebooks as a list of code cells, each scanned as its own small module.

IPython's ``!shell`` and ``%magic`` lines are not Python: they are blanked out
of the cell's Python source (so line numbers stay true) and handed back
separately, to be scanned as shell lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .sourcefile import Unscannable


@dataclass(frozen=True, slots=True)
class Cell:
    number: int  # 1-based among code cells, as Jupyter shows execution order independent
    python: str
    shell_lines: tuple[tuple[int, str], ...]


def code_cells(text: str) -> list[Cell]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unscannable(f"notebook is not valid JSON (line {exc.lineno})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise Unscannable("notebook has no 'cells' list (nbformat 4 expected)")
    cells = []
    number = 0
    for cell in doc["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(source)
        python_lines, shell = [], []
        whole_cell_magic = source.lstrip().startswith("%%")
        for i, line in enumerate(source.splitlines(), start=1):
            if whole_cell_magic:
                shell.append((i, line))
                python_lines.append("")
                continue
            stripped = line.lstrip()
            if stripped.startswith(("!", "%")):
                shell.append((i, stripped.lstrip("!%")))
                python_lines.append("")
            else:
                python_lines.append(line)
        cells.append(Cell(number, "\n".join(python_lines) + "\n", tuple(shell)))
    return cells


_MAGIC_MARK = "# torchport-magic-line: "


def notebook_sources(text: str) -> dict[int, str]:
    """Each code cell's source by cell number, magics turned into marker comments.

    The markers keep line numbers and survive an AST rewrite; ``replace_cell_sources``
    turns them back into the original magic lines.
    """
    doc = json.loads(text)
    sources: dict[int, str] = {}
    number = 0
    for cell in doc.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        number += 1
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if source.lstrip().startswith("%%"):
            continue
        lines = []
        for line in source.splitlines(keepends=True):
            if line.lstrip().startswith(("!", "%")):
                lines.append(_MAGIC_MARK + line.rstrip("\n") + "\n")
            else:
                lines.append(line)
        sources[number] = "".join(lines)
    return sources


def replace_cell_sources(text: str, new_sources: dict[int, str]) -> str:
    """The notebook with those cells' sources replaced; outputs and metadata untouched."""
    if not new_sources:
        return text
    doc = json.loads(text)
    number = 0
    for cell in doc.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        number += 1
        if number not in new_sources:
            continue
        restored = "".join(
            line.split(_MAGIC_MARK, 1)[1] if _MAGIC_MARK in line else line
            for line in new_sources[number].splitlines(keepends=True)
        )
        if isinstance(cell.get("source"), list):
            cell["source"] = restored.splitlines(keepends=True)
        else:
            cell["source"] = restored
    indent = _indent_of(text)
    trailing = "\n" if text.endswith("\n") else ""
    return json.dumps(doc, indent=indent, ensure_ascii=False) + trailing


def _indent_of(text: str) -> int | None:
    for line in text.splitlines()[1:3]:
        stripped = line.lstrip(" ")
        if stripped and len(stripped) != len(line):
            return len(line) - len(stripped)
    return None
