"""The leaderboard: success rate per mode and difficulty, and every task's details.

Written as Markdown (for people and docs/benchmarks/eval-suite.md), JSON and CSV (for
machines and spreadsheets) and PNG charts (``evals.charts``) that the Markdown shows. Success means
the verdict a correct port reaches for that task and target (``task.toml``).

A suite is a user's folder of repositories: task names, expectations, reasons and report
paths are escaped in the Markdown and formula-proof in the CSV (``tools.safetext``).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from torchport.agents.verdicts import Verdict
from torchport.tools.safetext import csv_cell, markdown_code, markdown_text, uri_path

from .charts import CHARTS, write_charts
from .tasks import DIFFICULTIES


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: success overall and per difficulty, mean precision/recall, totals."""
    by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_mode[r["mode"]].append(r)
    table = {}
    for mode, rows in by_mode.items():
        per_difficulty = {}
        for difficulty in DIFFICULTIES:
            some = [r for r in rows if r["difficulty"] == difficulty]
            if some:
                per_difficulty[difficulty] = {
                    "success": sum(r["success"] for r in some) / len(some),
                    "n": len(some),
                }
        table[mode] = {
            "success": sum(r["success"] for r in rows) / len(rows),
            "n": len(rows),
            Verdict.VERIFIED: sum(r["verdict"] == Verdict.VERIFIED for r in rows),
            "by_difficulty": per_difficulty,
            "precision": sum(r["precision"] for r in rows) / len(rows),
            "recall": sum(r["recall"] for r in rows) / len(rows),
            "residual_constructs": sum(max(r["residual_constructs"], 0) for r in rows),
            "llm_calls": sum(r["llm_calls"] for r in rows),
            "llm_tokens": sum(r["llm_tokens"] for r in rows),
            "wall_s": round(sum(r["wall_s"] for r in rows), 1),
        }
    return table


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


FAMILIES = ("libraries", "kernels")


def hard_tier(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, list[bool]]]:
    """The hard tasks' successes per (mode, target) and family: CUDA-only libraries and
    runtime features (the catalogue's job) apart from custom kernels (an LLM's or a
    human's). Results written before families existed count as libraries."""
    table: dict[tuple[str, str], dict[str, list[bool]]] = {}
    for r in results:
        if r["difficulty"] == "hard":
            cell = table.setdefault((r["mode"], r["target"]), {f: [] for f in FAMILIES})
            cell[r.get("family", "libraries")].append(bool(r["success"]))
    return table


def _hard_tier_lines(results: list[dict[str, Any]]) -> list[str]:
    table = hard_tier(results)
    if not table:
        return []
    lines = ["## Hard tier by family", "", "| mode | target | " + " | ".join(FAMILIES) + " |"]
    lines.append("|---|---|" + "---|" * len(FAMILIES))
    for (mode, target), cell in table.items():
        shares = [
            f"{_pct(sum(ok) / len(ok))} ({sum(ok)}/{len(ok)})" if ok else "–"
            for ok in (cell[f] for f in FAMILIES)
        ]
        lines.append(f"| {mode} | {target} | " + " | ".join(shares) + " |")
    return [*lines, ""]


def markdown(results: list[dict[str, Any]], command: str = "") -> str:
    summary = summarize(results)
    lines = ["# torchport eval", ""]
    if command:
        lines += [markdown_code(command), ""]
    head = ["mode", "success", *DIFFICULTIES, "verified", "precision", "recall", "residual"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, s in summary.items():
        cells = [mode, f"{_pct(s['success'])} ({s['n']})"]
        for difficulty in DIFFICULTIES:
            d = s["by_difficulty"].get(difficulty)
            cells.append(f"{_pct(d['success'])} ({d['n']})" if d else "–")
        cells += [
            str(s["verified"]),
            f"{s['precision']:.2f}",
            f"{s['recall']:.2f}",
            str(s["residual_constructs"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "success: the verdict a correct port reaches (task.toml); precision/recall: edits "
        "against the hand-written golden migration (statement level); residual: CUDA "
        "constructs the target still has to deal with in the result.",
        "",
        *_hard_tier_lines(results),
        "## Tasks",
        "",
        "| task | difficulty | mode | target | expected | verdict | P | R | residual | s "
        "| report |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        report = f"[report]({uri_path(r['report'])})" if r.get("report") else ""
        task, difficulty, mode, target, expected, verdict = (
            markdown_text(str(r[k]))
            for k in ("task", "difficulty", "mode", "target", "expected", "verdict")
        )
        lines.append(
            f"| {task} | {difficulty} | {mode} | {target} | "
            f"{expected} | {'✔ ' if r['success'] else '✘ '}{verdict} | "
            f"{r['precision']:.2f} | {r['recall']:.2f} | {r['residual_constructs']} | "
            f"{r['wall_s']} | {report} |"
        )
    if results:  # drawn beside this file (evals.charts)
        lines += ["", "## Charts", "", *(f"![{what}]({name})" for name, what in CHARTS.items())]
    return "\n".join(lines) + "\n"


def write(results: list[dict[str, Any]], out: Path, command: str = "") -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "leaderboard.md",
        "json": out / "leaderboard.json",
        "csv": out / "leaderboard.csv",
    }
    paths["markdown"].write_text(markdown(results, command), encoding="utf-8")
    paths["json"].write_text(
        json.dumps({"summary": summarize(results), "results": results}, indent=2)
    )
    with paths["csv"].open("w", newline="") as handle:
        fields = [k for k in results[0] if k not in ("outside_golden", "error")] if results else []
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: csv_cell(v) for k, v in r.items()} for r in results)
    paths.update({chart.name: chart for chart in write_charts(results, summarize(results), out)})
    return paths
