"""A first divergence (``agents.divergence``) as a reader sees it: a section of
verification.md with the table of the module calls around it, and ``divergence.png``, every
module call's largest relative error in execution order against the policy's tolerance.

Module names, classes and paths come from the program: each is a code span or escaped
text, never Markdown of the program's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torchport.tools.safetext import markdown_code, markdown_text

PLOT = "divergence.png"  # beside verification.md, which shows it


def _number(value: Any) -> str:
    return "—" if value is None else ("inf" if value == math.inf else f"{float(value):.3g}")


def markdown(found: Mapping[str, Any]) -> list[str]:
    """The section, or nothing when no divergence was looked for."""
    if not found:
        return []
    lines = ["", "## First divergence", "", markdown_text(str(found.get("summary", "")))]
    if found.get("weights"):
        lines += ["", f"Weights: {markdown_text(str(found['weights']))}."]
    rows = found.get("rows") or []
    if rows:
        lines += [
            "",
            "| # | module | class | defined at | dtype (original / port) | max abs | max rel "
            "| input matches | output matches | device ops |",
            "|---:|---|---|---|---|---:|---:|---|---|---|",
        ]
        lines += [_row(row) for row in rows]
    if found.get("profile"):
        lines += ["", f"![each module call's largest relative error, in execution order]({PLOT})"]
    return lines


def _row(row: Mapping[str, Any]) -> str:
    dtypes = " / ".join(str(d) for d in row.get("dtypes") or ())
    matches = {True: "yes", False: "**no**", None: "—"}
    ops = ", ".join(markdown_code(str(op), True) for op in row.get("ops") or [])
    code = [markdown_code(str(row.get(key)), True) for key in ("name", "cls", "where")]
    numbers = [_number(row.get("max_abs")), _number(row.get("max_rel"))]
    held = [matches[row.get("input_holds")], matches[row.get("holds")]]
    cells = [str(row.get("index")), *code, markdown_text(dtypes), *numbers, *held, ops]
    return "| " + " | ".join(cells) + " |"


def png(found: Mapping[str, Any], rtol: float) -> bytes | None:
    """``divergence.png``: the profile of ``found`` (``Divergence.profile``), or None."""
    profile = found.get("profile") or []
    if not profile:
        return None
    from matplotlib.figure import Figure  # only when a report draws: its import is slow

    from .plots import png as to_png

    floor = rtol / 100
    values = [max(float(v) if v is not None and v == v else 0.0, floor) for _, v in profile]
    values = [min(v, 1e6) for v in values]
    fig = Figure(figsize=(7.0, 3.2), layout="constrained")
    ax = fig.subplots()
    ax.plot(range(len(values)), values, "o-", markersize=3, color="#d62728")
    ax.axhline(rtol, color="#1f77b4", linestyle="--", label=f"policy rtol {rtol:g}")
    first = next((i for i, v in enumerate(values) if v > rtol), None)
    if first is not None:
        ax.axvline(first, color="#7f7f7f", linestyle=":", label=f"first: {profile[first][0]}")
    ax.set_yscale("log")
    ax.set_xlabel("module call, in execution order")
    ax.set_ylabel("max relative error")
    ax.legend(fontsize="small")
    fig.suptitle(
        f"step {found.get('step')}: port against original, module by module", fontsize="medium"
    )
    return to_png(fig)
