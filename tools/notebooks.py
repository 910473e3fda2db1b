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
